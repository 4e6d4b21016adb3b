// Command pause is the pod sandbox process that containerd (driven by the
// kubelet) runs as the first process of every pod: it holds the pod's
// namespaces open and does nothing else.
//
// The dev cluster has no container registry to reach, so the usual
// registry.k8s.io/pause image cannot be pulled; this binary stands in for it.
// It blocks forever, reaps zombie children on SIGCHLD (it may be PID 1 of a
// shared PID namespace) and exits 0 on SIGINT or SIGTERM.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGCHLD)
	for sig := range sigs {
		switch sig {
		case syscall.SIGCHLD:
			reap()
		default:
			os.Exit(0)
		}
	}
}

// reap collects every exited child without blocking.
func reap() {
	for {
		var ws syscall.WaitStatus
		pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
		if err == syscall.EINTR {
			continue
		}
		if err != nil || pid <= 0 {
			return
		}
	}
}
