package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"strings"

	"connectrpc.com/connect"
	"google.golang.org/genproto/googleapis/rpc/errdetails"

	"github.com/tenurehq/tenure/internal/registrar"
	"github.com/tenurehq/tenure/internal/server"
)

// countingWriter counts the bytes written through it.
type countingWriter struct {
	w io.Writer
	n int
}

func (c *countingWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += n
	return n, err
}

// wantsJSON tells whether a command line asks for -o json (before any
// "--", after which the arguments are a command's, as in tenure exec).
func wantsJSON(args []string) bool {
	for i, a := range args {
		switch a {
		case "--":
			return false
		case "-o=json", "--o=json":
			return true
		case "-o", "--o":
			if i+1 < len(args) && args[i+1] == "json" {
				return true
			}
		}
	}
	return false
}

// errorJSON is a failed command's error in -o json.
type errorJSON struct {
	Error errorBody `json:"error"`
}

type errorBody struct {
	// Reason is Tenure's machine-readable reason (API.md), or for an error
	// without one, the Connect code in capitals (UNAVAILABLE) or
	// INVALID_ARGUMENT for a usage error.
	Reason   string            `json:"reason"`
	Code     string            `json:"code"`
	Message  string            `json:"message"`
	Metadata map[string]string `json:"metadata,omitempty"`
}

// writeErrorJSON writes err to w as an errorJSON object.
func writeErrorJSON(w io.Writer, err error) {
	b := errorBody{Code: connect.CodeUnknown.String(), Message: err.Error()}
	var ue *usageError
	var ce *connect.Error
	switch {
	case errors.As(err, &ue):
		b.Reason, b.Code = "INVALID_ARGUMENT", connect.CodeInvalidArgument.String()
		b.Message, _, _ = strings.Cut(b.Message, "\n") // not the usage line after it
		b.Message = b.Reason + ": " + b.Message        // as every other error's
	case errors.As(err, &ce):
		b.Code = ce.Code().String()
		b.Reason = strings.ToUpper(b.Code)
		for _, d := range ce.Details() {
			if v, derr := d.Value(); derr == nil {
				if info, ok := v.(*errdetails.ErrorInfo); ok && info.GetDomain() == "tenure" {
					b.Reason, b.Metadata = info.GetReason(), info.GetMetadata()
				}
			}
		}
		if !reasonFirst.MatchString(b.Message) {
			b.Message = b.Reason + ": " + ce.Message()
		}
	case reasonFirst.MatchString(b.Message):
		b.Reason, _, _ = strings.Cut(b.Message, ":")
		b.Code = server.CodeOf(registrar.Reason(b.Reason)).String()
	}
	var line bytes.Buffer
	enc := json.NewEncoder(&line)
	enc.SetEscapeHTML(false) // "<token>" stays readable
	_ = enc.Encode(errorJSON{Error: b})
	_, _ = w.Write(line.Bytes())
}
