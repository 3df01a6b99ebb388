// Command pause is the test node's sandbox ("pause") process: it holds a Pod's namespaces, reaps the
// zombies of processes that end up as its children, and exits on SIGINT or SIGTERM, as the upstream
// pause container does. scripts/build-node builds it and packs it into the pause image the test node's
// containerd uses as its sandbox image, so that no image is pulled from a registry.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	if os.Getpid() != 1 {
		os.Stderr.WriteString("pause: warning: not running as PID 1\n")
	}
	signals := make(chan os.Signal, 8)
	signal.Notify(signals, syscall.SIGINT, syscall.SIGTERM, syscall.SIGCHLD)
	for sig := range signals {
		if sig != syscall.SIGCHLD {
			os.Exit(0)
		}
		for {
			var status syscall.WaitStatus
			pid, err := syscall.Wait4(-1, &status, syscall.WNOHANG, nil)
			if pid <= 0 || err != nil {
				break
			}
		}
	}
}
