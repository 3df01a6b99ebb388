module github.com/crashwatch/crashwatch/bench/loadgen

go 1.26.0
