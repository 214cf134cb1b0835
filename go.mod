module github.com/tenurehq/tenure

go 1.26.0

require (
	connectrpc.com/connect v1.21.1
	github.com/google/btree v1.1.3
	google.golang.org/protobuf v1.36.12
)
