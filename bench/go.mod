module github.com/tockwheel/tock/bench

go 1.25.0

replace github.com/tockwheel/tock => ../

require (
	github.com/cenkalti/backoff/v5 v5.0.3
	github.com/tockwheel/tock v0.0.0-00010101000000-000000000000
)
