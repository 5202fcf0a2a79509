// Package brokerfeatures reads the cluster-wide feature levels the brokers
// finalized (transactions v2 above all), which serve logs at start and the
// broker tests check: they decide how the brokers answer the executor's own
// transactional requests.
package brokerfeatures

import (
	"context"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// Features is what the brokers report of the cluster-wide feature levels
// that change how a transactional client is answered. The executor issues
// AddOffsetsToTxn and TxnOffsetCommit itself (DESIGN.md, "What is durable
// before an offset commits"), so whether transactions v2 (KIP-890 part 2:
// partitions added to a transaction by its first Produce, the epoch bumped
// at every EndTxn) is on decides which broker behaviour those requests
// meet. Logging it at start makes a support question answerable from the
// executor's log alone.
type Features struct {
	// Reported: the brokers answered ApiVersions with finalized features
	// (Kafka 3.x KRaft and later, kfake). Redpanda and older Kafka do not.
	Reported bool
	// TransactionVersion is the finalized transaction.version: 2 means
	// transactions v2 (KIP-890 part 2) is on; 0 or 1 that it is off.
	TransactionVersion int16
	// MetadataVersion is the finalized metadata.version (KRaft), 0 when
	// not reported.
	MetadataVersion int16
}

// TransactionsV2 reports whether transactions v2 (KIP-890 part 2) is on.
func (f Features) TransactionsV2() bool { return f.TransactionVersion >= 2 }

func (f Features) String() string {
	if !f.Reported {
		return "no finalized features reported (Redpanda, or Kafka before KRaft): transactions v1"
	}
	tv := "off"
	if f.TransactionsV2() {
		tv = "on"
	}
	return fmt.Sprintf("transaction.version %d (transactions v2, KIP-890: %s), metadata.version %d", f.TransactionVersion, tv, f.MetadataVersion)
}

// timeout bounds Read when ctx has no earlier deadline, as kafkaconf's
// Ping: long enough for a TLS and SASL handshake across regions.
const timeout = 10 * time.Second

// Read asks cl's brokers for their finalized features with one
// ApiVersions request.
func Read(ctx context.Context, cl *kgo.Client) (Features, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req := kmsg.NewPtrApiVersionsRequest()
	req.ClientSoftwareName = "onceflight"
	req.ClientSoftwareVersion = "1"
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		return Features{}, fmt.Errorf("ask the brokers for their features (ApiVersions): %w", err)
	}
	var f Features
	for _, ff := range resp.FinalizedFeatures {
		f.Reported = true
		switch ff.Name {
		case "transaction.version":
			f.TransactionVersion = ff.MaxVersionLevel
		case "metadata.version":
			f.MetadataVersion = ff.MaxVersionLevel
		}
	}
	return f, nil
}
