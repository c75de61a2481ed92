// Command coredns is CoreDNS (github.com/coredns/coredns) with only the plugins the real node's
// cluster DNS uses: kubernetes (Service and pod names), bind, cache, errors, log, health and ready.
// Linking fewer plugins than CoreDNS's default build keeps the cold build short; the server and
// each plugin are CoreDNS's own code, configured by the Corefile devcluster/realnode.py writes.
package main

import (
	"github.com/coredns/coredns/coremain"

	_ "github.com/coredns/coredns/plugin/bind"
	_ "github.com/coredns/coredns/plugin/cache"
	_ "github.com/coredns/coredns/plugin/errors"
	_ "github.com/coredns/coredns/plugin/health"
	_ "github.com/coredns/coredns/plugin/kubernetes"
	_ "github.com/coredns/coredns/plugin/log"
	_ "github.com/coredns/coredns/plugin/ready"
)

func main() {
	coremain.Run()
}
