package sqs_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"os"
	"os/exec"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/sinks/sqs"
)

// cliMessage is a message as `aws sqs receive-message --output json` prints it.
type cliMessage struct {
	MessageID         string `json:"MessageId"`
	Body              string
	Attributes        map[string]string
	MessageAttributes map[string]struct {
		StringValue string
		DataType    string
	}
}

// TestWireFormatReadByAWSCLI checks the wire format with a second, independent client: the
// aws CLI (botocore, which also verifies the body and attribute MD5 digests SQS returns).
func TestWireFormatReadByAWSCLI(t *testing.T) {
	t.Parallel()
	e := setup(t)
	cli, err := exec.LookPath("aws")
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("the aws CLI (aws-cli v1 with the SQS JSON protocol) is not on PATH; scripts/test installs it")
		}
		t.Skip("the aws CLI is not on PATH")
	}
	url := e.queue(t, randName("cli")+".fifo", nil)
	sink, err := sqs.New(e.sqs, nil)
	require.NoError(t, err)
	msgs := []core.Message{
		event(url, "a", 0, []byte(`{"order":42,"note":"größer"}`)),
		event(url, "b", 0, []byte{0xde, 0xad, 0xbe, 0xef, 0x00}),
		event(url, "c", 0, nil),
	}
	msgs[2].Headers = nil
	msgs[2].AggregateVersion = 0
	msgs[2].Tenant = ""
	for _, err := range send(t, sink, msgs) {
		require.NoError(t, err)
	}

	cmd := exec.CommandContext(context.Background(), cli, "sqs", "receive-message", "--endpoint-url", e.ep,
		"--queue-url", url, "--attribute-names", "All", "--message-attribute-names", "All",
		"--max-number-of-messages", "10", "--wait-time-seconds", "2", "--output", "json")
	cmd.Env = append(os.Environ(), "AWS_ACCESS_KEY_ID="+testKey, "AWS_SECRET_ACCESS_KEY="+testSecret,
		"AWS_DEFAULT_REGION="+testRegion, "AWS_REGION="+testRegion, "AWS_PAGER=")
	out, err := cmd.Output()
	if ee, ok := err.(*exec.ExitError); ok {
		t.Fatalf("aws sqs receive-message: %v: %s", err, ee.Stderr)
	}
	require.NoError(t, err)
	var res struct{ Messages []cliMessage }
	require.NoError(t, json.Unmarshal(out, &res), "%s", out)
	require.Equal(t, 3, len(res.Messages), "FIFO: one per group, three groups")

	byID := map[string]cliMessage{}
	for _, m := range res.Messages {
		byID[m.MessageAttributes["outbox.id"].StringValue] = m
	}
	for i, m := range msgs {
		r, ok := byID[m.ID]
		require.True(t, ok, "message %d", i)
		s := func(name string) string {
			a, ok := r.MessageAttributes[name]
			if !ok {
				return ""
			}
			require.Equal(t, "String", a.DataType, name)
			return a.StringValue
		}
		require.Equal(t, m.Type, s("outbox.type"))
		require.Equal(t, m.AggregateType+"/"+m.AggregateID, s("outbox.aggregate"))
		require.Equal(t, m.SchemaID, s("outbox.schema_id"))
		require.Equal(t, m.Tenant, s("outbox.tenant"))
		require.Equal(t, m.CausationID, s("outbox.causation_id"))
		require.Equal(t, m.CorrelationID, s("outbox.correlation_id"))
		require.Equal(t, m.Headers["traceparent"], s("traceparent"))
		if m.AggregateVersion > 0 {
			v := r.MessageAttributes["outbox.aggregate_version"]
			require.Equal(t, "Number", v.DataType)
			require.Equal(t, strconv.FormatInt(m.AggregateVersion, 10), v.StringValue)
		} else {
			require.NotContains(t, r.MessageAttributes, "outbox.aggregate_version")
		}
		require.Equal(t, m.GroupID, r.Attributes["MessageGroupId"])
		require.Equal(t, m.ID, r.Attributes["MessageDeduplicationId"])

		var meta struct {
			V            int               `json:"v"`
			CreatedAt    string            `json:"created_at"`
			PartitionKey string            `json:"partition_key"`
			Headers      map[string]string `json:"headers"`
			Encoding     string            `json:"encoding"`
		}
		require.NoError(t, json.Unmarshal([]byte(s("outbox.meta")), &meta))
		require.Equal(t, 1, meta.V)
		require.Equal(t, m.PartitionKey, meta.PartitionKey)
		require.Equal(t, m.CreatedAt.Format("2006-01-02T15:04:05.000000Z07:00"), meta.CreatedAt)
		switch i {
		case 0:
			require.Equal(t, map[string]string{"x-app": "test"}, meta.Headers)
			require.Equal(t, "", meta.Encoding)
			require.Equal(t, string(m.Payload), r.Body)
		case 1:
			require.Equal(t, "base64", meta.Encoding)
			p, err := base64.StdEncoding.DecodeString(r.Body)
			require.NoError(t, err)
			require.Equal(t, m.Payload, p)
		case 2:
			require.Nil(t, meta.Headers)
			require.Equal(t, "empty", meta.Encoding)
			require.Equal(t, "-", r.Body)
		}
	}
}
