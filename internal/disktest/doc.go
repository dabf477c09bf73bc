// Package disktest gives tests a real disk to fill: a small tmpfs mounted for the test (Linux
// only, and only as root or with CAP_SYS_ADMIN), and a ballast file that fills it to a chosen
// room. The embedded engine's tests and tockd's end-to-end tests of a full disk share it.
package disktest
