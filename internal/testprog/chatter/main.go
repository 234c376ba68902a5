// Command chatter prints numbered lines on a schedule, for the log-following tests: every
// line is "line N" on stdout (odd N on stderr), some coloured, some longer than Docker's
// 16 KiB log message limit.
package main

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

func main() {
	n, _ := strconv.Atoi(os.Getenv("CHATTER_LINES"))
	every, _ := time.ParseDuration(os.Getenv("CHATTER_EVERY"))
	for i := 1; i <= n; i++ {
		out := os.Stdout
		if i%2 == 1 {
			out = os.Stderr
		}
		switch {
		case i%7 == 0:
			fmt.Fprintf(out, "\x1b[36m(RayWorkerWrapper pid=%d, ip=10.0.0.2)\x1b[0m line %d\n", i, i)
		case i%10 == 0:
			fmt.Fprintf(out, "line %d %s\n", i, strings.Repeat("x", 40000))
		default:
			fmt.Fprintf(out, "line %d\n", i)
		}
		time.Sleep(every)
	}
	if os.Getenv("CHATTER_BLOCK") != "" {
		select {}
	}
}
