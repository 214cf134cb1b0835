module github.com/tenurehq/tenure

go 1.26

require (
	connectrpc.com/connect v1.21.1 // indirect
	github.com/google/btree v1.1.3 // indirect
	google.golang.org/protobuf v1.36.12 // indirect
	pgregory.net/rapid v1.3.0 // indirect
)
