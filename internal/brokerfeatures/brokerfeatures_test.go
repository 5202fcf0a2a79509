package brokerfeatures

import (
	"context"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
)

// TestBrokerFeatures: kfake finalizes transaction.version 2, as Kafka 4.x
// does on a new cluster; the string says so in the words serve logs.
func TestBrokerFeatures(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	f, err := Read(context.Background(), cl)
	if err != nil {
		t.Fatal(err)
	}
	if !f.Reported || !f.TransactionsV2() || f.MetadataVersion == 0 {
		t.Fatalf("features %+v", f)
	}
	if s := f.String(); !strings.Contains(s, "transactions v2, KIP-890: on") {
		t.Errorf("String() = %q", s)
	}
	if s := (Features{}).String(); !strings.Contains(s, "transactions v1") {
		t.Errorf("unreported features read %q", s)
	}
}
