module tsubame

go 1.26.8

require go.etcd.io/bbolt v1.5.0

require (
	github.com/maypok86/otter/v2 v2.4.0 // indirect
	github.com/stretchr/testify v1.12.1 // indirect
	golang.org/x/sys v0.47.0 // indirect
)
