// Command kstatus prints the kstatus verdict (sigs.k8s.io/cli-utils/pkg/kstatus/status.Compute) of
// Kubernetes objects, so that the Python tests can check crashwatch's status writes against the very
// library that Flux, Argo-adjacent tooling and Helm 4's --wait use to decide whether an object is
// Current, InProgress or Failed, rather than against a re-implementation of its rules.
//
// Input on stdin: one object as JSON, or a JSON array of objects (as read back from the API server).
// Output: one JSON line per object, {"status": "Failed", "message": "..."}, in input order.
package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utiljson "k8s.io/apimachinery/pkg/util/json"
	"sigs.k8s.io/cli-utils/pkg/kstatus/status"
)

type verdict struct {
	Status  string `json:"status"`
	Message string `json:"message"`
}

func main() {
	if err := run(os.Stdin, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "kstatus:", err)
		os.Exit(1)
	}
}

func run(in io.Reader, out io.Writer) error {
	data, err := io.ReadAll(in)
	if err != nil {
		return err
	}
	// utiljson, as the API machinery decodes: whole numbers as int64 (metadata.generation is read as one)
	var objects []map[string]any
	if trimmed := bytes.TrimSpace(data); len(trimmed) > 0 && trimmed[0] == '[' {
		err = utiljson.Unmarshal(trimmed, &objects)
	} else {
		var one map[string]any
		err = utiljson.Unmarshal(trimmed, &one)
		objects = append(objects, one)
	}
	if err != nil {
		return fmt.Errorf("reading the objects: %w", err)
	}
	encoder := json.NewEncoder(out)
	for _, object := range objects {
		if object == nil {
			return fmt.Errorf("not an object")
		}
		result, err := status.Compute(&unstructured.Unstructured{Object: object})
		if err != nil {
			return err
		}
		if err := encoder.Encode(verdict{Status: result.Status.String(), Message: result.Message}); err != nil {
			return err
		}
	}
	return nil
}
