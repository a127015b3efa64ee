// The pod sandbox's process for the tests' real node (what registry.k8s.io/pause holds): no
// registry is reachable here, so the node's pause image is made from this.
module scorestream.dev/tests/cluster/pause

go 1.24.0
