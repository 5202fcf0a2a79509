package config

import "testing"

// The example shipped in deploy/ must stay a valid configuration.
func TestDeployExampleLoads(t *testing.T) {
	c, err := Load("../../deploy/onceflight.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Actions) != 2 {
		t.Fatalf("actions: %d", len(c.Actions))
	}
}
