// Package bench measures tock beside other Go libraries that do the same jobs: the Go runtime's
// timers and go-zero's TimingWheel for the wheel, and more for the packages built on it. It is a
// module of its own so that tock itself never depends on them.
//
// Run everything with
//
//	cd bench && go test -run '^$' -bench . -benchmem
//
// Each benchmark has one sub-benchmark per library, run one after the other in the same process,
// so compare ratios within a run rather than figures across runs.
package bench
