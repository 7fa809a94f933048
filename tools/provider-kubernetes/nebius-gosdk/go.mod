// A stand-in for github.com/nebius/gosdk, written here: the Go module proxy
// serves no version of it, and provider-kubernetes v1.3.0 imports it only to
// authenticate to Nebius clusters, which the tests never do. It has the
// names provider-kubernetes calls; building an SDK fails, naming why.
module github.com/nebius/gosdk

go 1.26
