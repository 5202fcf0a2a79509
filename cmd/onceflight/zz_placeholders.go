package main

import (
	"errors"

	"github.com/spf13/cobra"
)

// Placeholders until serve.go and demo.go land; delete this file then.

func newServeCmd() *cobra.Command {
	return &cobra.Command{Use: "serve", Short: "Run an executor", RunE: func(*cobra.Command, []string) error {
		return errors.New("not implemented")
	}}
}

func newDemoCmd() *cobra.Command {
	return &cobra.Command{Use: "demo", Short: "Run everything on the embedded broker with a demo service", RunE: func(*cobra.Command, []string) error {
		return errors.New("not implemented")
	}}
}
