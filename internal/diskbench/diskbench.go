// Package diskbench holds what tock's durable-write benchmarks share: the anchor they are measured
// against, the disk's own limit for appending records with one sync per group (as delayq's group
// commit does), and the loop that measures a put rate beside it. delayq's benchmarks and the
// side-by-side bench module both use them, so they measure the same thing.
package diskbench

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

// RawAppend appends rec to a file in a temporary directory b.N times from one goroutine, with one
// write and one fdatasync per perSync records, and reports the rate as msgs/s.
func RawAppend(b *testing.B, rec []byte, perSync int) {
	f, err := os.Create(filepath.Join(b.TempDir(), "raw"))
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	buf := make([]byte, 0, perSync*len(rec))
	start := time.Now()
	for i := 0; b.Loop(); i++ {
		buf = append(buf, rec...)
		if i%perSync == perSync-1 {
			if _, err := f.Write(buf); err != nil {
				b.Fatal(err)
			}
			if err := fdatasync(f); err != nil {
				b.Fatal(err)
			}
			buf = buf[:0]
		}
	}
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "msgs/s")
}

// Parallel calls put b.N times from parallelism goroutines per processor and reports the rate as
// msgs/s, for the systems measured against RawAppend.
func Parallel(b *testing.B, parallelism int, put func() error) {
	b.SetParallelism(parallelism)
	start := time.Now()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if err := put(); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "msgs/s")
}
