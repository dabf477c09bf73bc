//go:build !unix

package main

// openFilesLimit returns 0: the limit is unknown here.
func openFilesLimit() int { return 0 }
