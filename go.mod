module github.com/tockwheel/tock

go 1.25
