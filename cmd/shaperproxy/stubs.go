package main

import (
	"context"
	"io"
)

func runShape(ctx context.Context, args []string, stdout, stderr io.Writer) error { return nil }
