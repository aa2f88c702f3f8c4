//go:build failover

package failover_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// rig is the Patroni cluster scripts/failover started (scripts/lib/patroni-rig.sh, rig_up).
type rig struct {
	dsn, dir, ctl, slot string
	rest                []string
}

// needRig reads the rig's addresses; without them the test fails: these tests run only through
// scripts/failover, which starts the rig.
func needRig(t *testing.T) *rig {
	t.Helper()
	r := &rig{
		dsn:  os.Getenv("OUTBOXKIT_FAILOVER_DSN"),
		dir:  os.Getenv("OUTBOXKIT_FAILOVER_DIR"),
		ctl:  os.Getenv("OUTBOXKIT_FAILOVER_PATRONICTL"),
		slot: os.Getenv("OUTBOXKIT_FAILOVER_SLOT"),
		rest: strings.Split(os.Getenv("OUTBOXKIT_FAILOVER_REST"), ","),
	}
	if r.dsn == "" || r.dir == "" || r.ctl == "" || r.slot == "" || r.rest[0] == "" {
		t.Fatal("no Patroni rig: run these tests with scripts/failover (it starts etcd, Patroni and two PostgreSQL nodes)")
	}
	r.waitHealthy(t, 2*time.Minute)
	return r
}

// member is one node as Patroni's REST API (/cluster) reports it.
type member struct {
	Name     string `json:"name"`
	Role     string `json:"role"` // leader, sync_standby, replica
	State    string `json:"state"`
	Host     string `json:"host"`
	Port     int    `json:"port"`
	Timeline int    `json:"timeline"`
}

func (r *rig) members() ([]member, error) {
	c := http.Client{Timeout: 2 * time.Second}
	var last error
	for _, a := range r.rest {
		resp, err := c.Get("http://" + a + "/cluster")
		if err != nil {
			last = err
			continue
		}
		var body struct {
			Members []member `json:"members"`
		}
		err = json.NewDecoder(resp.Body).Decode(&body)
		resp.Body.Close()
		if err != nil {
			last = err
			continue
		}
		return body.Members, nil
	}
	return nil, fmt.Errorf("no Patroni REST API answered: %w", last)
}

// healthy reports the leader's name when the cluster has a running leader and a running
// synchronous standby.
func (r *rig) healthy() (leader, standby string, ok bool) {
	ms, err := r.members()
	if err != nil {
		return "", "", false
	}
	for _, m := range ms {
		running := m.State == "running" || m.State == "streaming"
		switch {
		case m.Role == "leader" && running:
			leader = m.Name
		case m.Role == "sync_standby" && running:
			standby = m.Name
		}
	}
	return leader, standby, leader != "" && standby != ""
}

func (r *rig) waitHealthy(t *testing.T, within time.Duration) (leader, standby string) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		if l, s, ok := r.healthy(); ok {
			return l, s
		}
		if time.Now().After(deadline) {
			ms, err := r.members()
			t.Fatalf("the Patroni cluster has no running leader and sync standby after %v: %+v %v", within, ms, err)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// waitLeader waits until a running leader other than old is reported and returns its name.
func (r *rig) waitLeader(t *testing.T, old string, within time.Duration) string {
	t.Helper()
	deadline := time.Now().Add(within)
	for time.Now().Before(deadline) {
		ms, _ := r.members()
		for _, m := range ms {
			if m.Role == "leader" && m.Name != old && m.State == "running" {
				return m.Name
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("no new leader within %v", within)
	return ""
}

// switchover asks Patroni for a planned switchover from the leader to the sync standby.
func (r *rig) switchover(t *testing.T) (from, to string) {
	t.Helper()
	from, to = r.waitHealthy(t, time.Minute)
	out, err := exec.Command("patronictl", "-c", r.ctl, "switchover", "--leader", from, "--candidate", to, "--force").CombinedOutput()
	t.Logf("patronictl switchover --leader %s --candidate %s: %s", from, to, strings.TrimSpace(string(out)))
	if err != nil {
		t.Fatalf("patronictl switchover: %v", err)
	}
	return from, to
}

// crash kills the leader's node: SIGKILL to its Patroni and then to its postmaster, as when
// the machine dies (a SIGKILL of the postmaster alone is repaired in place by the node's
// Patroni, which restarts PostgreSQL while it holds the leader key). It returns the node's
// name; restart brings the node back as a replica.
func (r *rig) crash(t *testing.T) string {
	t.Helper()
	leader, _ := r.waitHealthy(t, time.Minute)
	r.kill(t, leader)
	return leader
}

// kill SIGKILLs the Patroni and then the postmaster of node leader.
func (r *rig) kill(t *testing.T, leader string) {
	t.Helper()
	runuser := r.pidFile(t, r.dir+"/"+leader+".pid")
	out, err := exec.Command("pgrep", "-P", strconv.Itoa(runuser)).Output()
	if err != nil {
		t.Fatalf("the Patroni process of %s (child of %d): %v", leader, runuser, err)
	}
	patroni, err := strconv.Atoi(strings.Fields(string(out))[0])
	if err != nil {
		t.Fatal(err)
	}
	postmaster := r.pidFile(t, r.dir+"/"+leader+"/data/postmaster.pid")
	if err := syscall.Kill(patroni, syscall.SIGKILL); err != nil {
		t.Fatalf("kill Patroni %d: %v", patroni, err)
	}
	if err := syscall.Kill(postmaster, syscall.SIGKILL); err != nil {
		t.Fatalf("kill postmaster %d: %v", postmaster, err)
	}
	t.Logf("SIGKILL to the Patroni (pid %d) and the postmaster (pid %d) of leader %s", patroni, postmaster, leader)
}

// setConfig changes the cluster's dynamic configuration (patronictl edit-config -s k=v ...).
func (r *rig) setConfig(t *testing.T, kv ...string) {
	t.Helper()
	args := []string{"-c", r.ctl, "edit-config", "--force"}
	for _, s := range kv {
		args = append(args, "-s", s)
	}
	out, err := exec.Command("patronictl", args...).CombinedOutput()
	if err != nil {
		t.Fatalf("patronictl edit-config %v: %v: %s", kv, err, out)
	}
}

// restart starts the Patroni of node name again (it rejoins as a replica, with pg_rewind).
func (r *rig) restart(t *testing.T, name string) {
	t.Helper()
	cmd := exec.Command("bash", "-c", `source ../../scripts/lib/patroni-rig.sh && rig_node_start "$1"`, "bash", name)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("restart node %s: %v: %s", name, err, out)
	}
}

func (r *rig) pidFile(t *testing.T, path string) int {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(strings.SplitN(string(b), "\n", 2)[0]))
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return pid
}

// waitFor polls cond every 50 ms until it holds or within passed.
func waitFor(within time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(50 * time.Millisecond)
	}
	return true
}

var _ = context.Background
