package deploy

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/goccy/go-yaml"

	"github.com/onceflight/onceflight/internal/httpauth"
	"github.com/onceflight/onceflight/internal/proctest"
)

// bin is the onceflight binary, built once by TestMain: the flags and
// metrics the files here name are checked against what it really has.
var bin string

func TestMain(m *testing.M) {
	os.Exit(proctest.Main(m, false, &bin))
}

// promtool returns promtool's path, or skips the test naming it.
func promtool(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("promtool")
	if err != nil {
		t.Skip("promtool not found (Debian package prometheus; .ci/run installs it): alert rules not checked")
	}
	return p
}

func runOK(t *testing.T, name string, args ...string) string {
	t.Helper()
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", filepath.Base(name), strings.Join(args, " "), err, out)
	}
	return string(out)
}

func TestAlertRules(t *testing.T) {
	p := promtool(t)
	runOK(t, p, "check", "rules", "observability/alerts.yaml")
	// The unit tests resolve rule_files relative to their own file.
	runOK(t, p, "test", "rules", "observability/alerts_test.yaml")
}

// TestComposePrometheusConfig checks prometheus.yml with the rule file at
// the path compose mounts it to.
func TestComposePrometheusConfig(t *testing.T) {
	p := promtool(t)
	raw := readFile(t, "compose/prometheus.yml")
	target := mountTarget(t, "prometheus", "../observability/alerts.yaml")
	if !strings.Contains(raw, target) {
		t.Fatalf("prometheus.yml does not load the alert rules from %s, where compose mounts them", target)
	}
	abs, err := filepath.Abs("observability/alerts.yaml")
	if err != nil {
		t.Fatal(err)
	}
	cfg := filepath.Join(t.TempDir(), "prometheus.yml")
	if err := os.WriteFile(cfg, []byte(strings.ReplaceAll(raw, target, abs)), 0o644); err != nil {
		t.Fatal(err)
	}
	runOK(t, p, "check", "config", cfg)
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func parseYAML(t *testing.T, path string) map[string]any {
	t.Helper()
	var v map[string]any
	if err := yaml.Unmarshal([]byte(readFile(t, path)), &v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	if len(v) == 0 {
		t.Fatalf("%s: empty", path)
	}
	return v
}

// get walks v along keys (map keys or list indexes).
func get(v any, keys ...any) any {
	for _, k := range keys {
		switch k := k.(type) {
		case string:
			m, ok := v.(map[string]any)
			if !ok {
				return nil
			}
			v = m[k]
		case int:
			l, ok := v.([]any)
			if !ok || k >= len(l) {
				return nil
			}
			v = l[k]
		}
	}
	return v
}

func strs(v any) []string {
	l, _ := v.([]any)
	out := make([]string, 0, len(l))
	for _, e := range l {
		out = append(out, fmt.Sprint(e))
	}
	return out
}

var (
	helpMu    sync.Mutex
	helpFlags = map[string]map[string]bool{}
	flagLine  = regexp.MustCompile(`^\s+(?:-\w, )?--([a-z0-9-]+)`)
)

// flagsOf returns the flags `onceflight <sub...> --help` lists, global
// ones included.
func flagsOf(t *testing.T, sub ...string) map[string]bool {
	t.Helper()
	helpMu.Lock()
	defer helpMu.Unlock()
	key := strings.Join(sub, " ")
	if f, ok := helpFlags[key]; ok {
		return f
	}
	out := runOK(t, bin, append(sub, "--help")...)
	f := map[string]bool{}
	for line := range strings.SplitSeq(out, "\n") {
		if m := flagLine.FindStringSubmatch(line); m != nil {
			f[m[1]] = true
		}
	}
	if len(f) < 2 {
		t.Fatalf("onceflight %s --help lists no flags:\n%s", key, out)
	}
	helpFlags[key] = f
	return f
}

// checkArgs checks an onceflight argument list: a known subcommand first,
// then only flags it has.
func checkArgs(t *testing.T, where string, args []string) {
	t.Helper()
	if len(args) == 0 || strings.HasPrefix(args[0], "-") {
		t.Errorf("%s: %q does not start with a subcommand", where, args)
		return
	}
	flags := flagsOf(t, args[0])
	for _, a := range args[1:] {
		name, ok := strings.CutPrefix(a, "--")
		if !ok {
			continue
		}
		name, _, _ = strings.Cut(name, "=")
		if !flags[name] {
			t.Errorf("%s: onceflight %s has no flag --%s", where, args[0], name)
		}
	}
}

// checkEnv checks that an ONCEFLIGHT_* variable sets a flag of sub.
func checkEnv(t *testing.T, where, sub, name string) {
	t.Helper()
	flag, ok := strings.CutPrefix(name, "ONCEFLIGHT_")
	if !ok {
		return
	}
	flag = strings.ToLower(strings.ReplaceAll(flag, "_", "-"))
	if !flagsOf(t, sub)[flag] {
		t.Errorf("%s: %s names no flag of onceflight %s (--%s)", where, name, sub, flag)
	}
}

// flagValues returns the values of the --flags in args, written
// --flag=value or --flag value.
func flagValues(args []string) map[string]string {
	out := map[string]string{}
	for i := 0; i < len(args); i++ {
		name, ok := strings.CutPrefix(args[i], "--")
		if !ok {
			continue
		}
		if n, v, eq := strings.Cut(name, "="); eq {
			out[n] = v
		} else if i+1 < len(args) && !strings.HasPrefix(args[i+1], "--") {
			out[name] = args[i+1]
			i++
		} else {
			out[name] = "true"
		}
	}
	return out
}

// checkHTTPAccess checks serve's arguments against the rule serve
// enforces at start (docs/http.md#who-may-read-the-records): records on a
// non-loopback --http only with authentication. A file here that breaks
// it would be an executor that does not start. It returns the flags.
func checkHTTPAccess(t *testing.T, where string, args []string) map[string]string {
	t.Helper()
	f := flagValues(args)
	addr, ok := f["http"]
	if !ok {
		addr = "127.0.0.1:8080"
	}
	auth := f["http-token-file"] != "" || (f["http-trusted-proxy-header"] != "" && f["http-trusted-proxies"] != "")
	if !httpauth.Loopback(addr) && !auth {
		t.Errorf("%s: --http %s is not a loopback address and has no --http-token-file or trusted proxy header: serve refuses to start", where, addr)
	}
	if f["http-trusted-proxy-header"] != "" {
		for _, p := range strings.Split(f["http-trusted-proxies"], ",") {
			if p == "" || p == "0.0.0.0/0" || p == "::/0" {
				t.Errorf("%s: --http-trusted-proxies %q trusts everybody's header", where, f["http-trusted-proxies"])
			}
		}
	}
	return f
}

// portOf returns the port of host:port.
func portOf(t *testing.T, where, addr string) string {
	t.Helper()
	_, port, err := net.SplitHostPort(addr)
	if err != nil || port == "" {
		t.Fatalf("%s: %q is not host:port", where, addr)
	}
	return port
}

const ourImage = "onceflight:latest"

func TestCompose(t *testing.T) {
	c := parseYAML(t, "compose/compose.yaml")
	services, _ := c["services"].(map[string]any)
	for _, want := range []string{"redpanda", "executor-1", "executor-2", "demo-service", "prometheus", "grafana"} {
		if services[want] == nil {
			t.Errorf("compose has no service %q", want)
		}
	}
	for name, s := range services {
		where := "compose service " + name
		image := fmt.Sprint(get(s, "image"))
		if image == ourImage {
			ctx := fmt.Sprint(get(s, "build", "context"))
			df := fmt.Sprint(get(s, "build", "dockerfile"))
			if _, err := os.Stat(filepath.Join("compose", ctx, df)); err != nil {
				t.Errorf("%s: builds %s from %s/%s: %v", where, image, ctx, df, err)
			}
			cmd := strs(get(s, "command"))
			if len(cmd) > 0 {
				checkArgs(t, where, cmd)
			}
			if len(cmd) > 0 && cmd[0] == "serve" {
				f := checkHTTPAccess(t, where, cmd)
				// Prometheus scrapes the open metrics listener, which
				// needs no token.
				if m := f["metrics-http"]; m == "" {
					t.Errorf("%s: no --metrics-http for Prometheus", where)
				} else if target := name + ":" + portOf(t, where, m); !strings.Contains(readFile(t, "compose/prometheus.yml"), `"`+target+`"`) {
					t.Errorf("prometheus.yml does not scrape %s, the --metrics-http of %s", target, where)
				}
			}
			env, _ := get(s, "environment").(map[string]any)
			sub := "serve"
			if len(cmd) > 0 {
				sub = cmd[0]
			}
			for k := range env {
				checkEnv(t, where, sub, k)
			}
		} else if !regexp.MustCompile(`^[\w./-]+:v?\d[\w.-]*$`).MatchString(image) {
			t.Errorf("%s: image %q is not pinned to a version", where, image)
		}
		for _, v := range strs(get(s, "volumes")) {
			src, _, _ := strings.Cut(v, ":")
			if strings.HasPrefix(src, ".") {
				if _, err := os.Stat(filepath.Join("compose", src)); err != nil {
					t.Errorf("%s: mounts %s: %v", where, src, err)
				}
			}
		}
	}
	// Grafana loads the dashboard from the directory its provider names.
	provider := parseYAML(t, "compose/grafana/dashboards/onceflight.yaml")
	dir := fmt.Sprint(get(provider, "providers", 0, "options", "path"))
	if target := mountTarget(t, "grafana", "../observability/dashboard.json"); filepath.Dir(target) != dir {
		t.Errorf("the dashboard is mounted at %s, but the provider loads %s", target, dir)
	}
	// The executors' actions file is valid.
	runOK(t, bin, "config", "validate", "compose/onceflight.yaml")
}

// mountTarget returns where compose service mounts the file src.
func mountTarget(t *testing.T, service, src string) string {
	t.Helper()
	c := parseYAML(t, "compose/compose.yaml")
	for _, v := range strs(get(c, "services", service, "volumes")) {
		parts := strings.Split(v, ":")
		if len(parts) >= 2 && parts[0] == src {
			return parts[1]
		}
	}
	t.Fatalf("compose service %s does not mount %s", service, src)
	return ""
}

func TestKubernetes(t *testing.T) {
	k := parseYAML(t, "kubernetes/kustomization.yaml")
	docs := map[string]map[string]any{} // kind -> document
	for _, r := range strs(k["resources"]) {
		d := parseYAML(t, filepath.Join("kubernetes", r))
		docs[fmt.Sprint(d["kind"])] = d
	}
	for _, kind := range []string{"StatefulSet", "ConfigMap", "Service", "PodDisruptionBudget"} {
		if docs[kind] == nil {
			t.Fatalf("kustomization has no %s", kind)
		}
	}
	sts, cm, svc, pdb := docs["StatefulSet"], docs["ConfigMap"], docs["Service"], docs["PodDisruptionBudget"]
	cmName := fmt.Sprint(get(cm, "metadata", "name"))
	cmData, _ := cm["data"].(map[string]any)

	if got := fmt.Sprint(get(svc, "spec", "clusterIP")); got != "None" {
		t.Errorf("Service clusterIP %q, want None (headless)", got)
	}
	if sn, name := get(sts, "spec", "serviceName"), get(svc, "metadata", "name"); sn != name {
		t.Errorf("StatefulSet serviceName %v, Service name %v", sn, name)
	}
	podLabels, _ := get(sts, "spec", "template", "metadata", "labels").(map[string]any)
	for what, sel := range map[string]any{
		"PodDisruptionBudget": get(pdb, "spec", "selector", "matchLabels"),
		"Service":             get(svc, "spec", "selector"),
		"StatefulSet":         get(sts, "spec", "selector", "matchLabels"),
	} {
		m, _ := sel.(map[string]any)
		if len(m) == 0 {
			t.Errorf("%s has no selector", what)
		}
		for k, v := range m {
			if podLabels[k] != v {
				t.Errorf("%s selects %s=%v, which the pods do not carry", what, k, v)
			}
		}
	}
	ann, _ := get(sts, "spec", "template", "metadata", "annotations").(map[string]any)
	if ann["prometheus.io/scrape"] != "true" || ann["prometheus.io/path"] != "/metrics" {
		t.Errorf("pod template lacks the scrape annotations: %v", ann)
	}
	if get(sts, "spec", "volumeClaimTemplates", 0, "metadata", "name") == nil {
		t.Error("StatefulSet has no volume claim for --data-dir")
	}

	c := get(sts, "spec", "template", "spec", "containers", 0)
	if img := fmt.Sprint(get(c, "image")); img != ourImage {
		t.Errorf("image %q, want %q (what make image tags)", img, ourImage)
	}
	args := strs(get(c, "args"))
	checkArgs(t, "StatefulSet args", args)
	for _, e := range get(c, "env").([]any) {
		name := fmt.Sprint(get(e, "name"))
		checkEnv(t, "StatefulSet env", args[0], name)
		if ref := get(e, "valueFrom", "configMapKeyRef"); ref != nil {
			if get(ref, "name") != cmName || cmData[fmt.Sprint(get(ref, "key"))] == nil {
				t.Errorf("env %s refers to ConfigMap %v key %v, which does not exist", name, get(ref, "name"), get(ref, "key"))
			}
		}
	}
	// The probes and Prometheus reach the open metrics listener; the
	// records on --http need the token mounted from the Secret.
	flags := checkHTTPAccess(t, "StatefulSet args", args)
	ports := map[string]string{} // name -> containerPort
	for _, p := range get(c, "ports").([]any) {
		ports[fmt.Sprint(get(p, "name"))] = fmt.Sprint(get(p, "containerPort"))
	}
	if flags["metrics-http"] == "" || ports["metrics"] != portOf(t, "--metrics-http", flags["metrics-http"]) {
		t.Errorf("--metrics-http %q is not the container port named metrics (%v)", flags["metrics-http"], ports)
	}
	if ann["prometheus.io/port"] != ports["metrics"] {
		t.Errorf("Prometheus scrapes port %v, the metrics listener is %s", ann["prometheus.io/port"], ports["metrics"])
	}
	probes := map[string]string{}
	for _, p := range []string{"startupProbe", "readinessProbe", "livenessProbe"} {
		probes[p] = fmt.Sprint(get(c, p, "httpGet", "path"))
		if port := fmt.Sprint(get(c, p, "httpGet", "port")); port != "metrics" {
			t.Errorf("%s on port %s, want metrics (no credentials needed there)", p, port)
		}
	}
	if probes["readinessProbe"] != "/readyz" || probes["livenessProbe"] != "/healthz" {
		t.Errorf("probes %v: want readiness on /readyz, liveness on /healthz", probes)
	}
	if get(c, "resources", "requests") == nil || get(c, "resources", "limits") == nil {
		t.Error("container has no resources")
	}
	// Every mounted volume exists; the config volume is the ConfigMap and
	// holds the file --config names.
	vols := map[string]any{}
	for _, v := range get(sts, "spec", "template", "spec", "volumes").([]any) {
		vols[fmt.Sprint(get(v, "name"))] = v
	}
	vols["data"] = "claim"
	var configFile string
	for _, a := range args {
		if v, ok := strings.CutPrefix(a, "--config="); ok {
			configFile = v
		}
	}
	found := false
	for _, m := range get(c, "volumeMounts").([]any) {
		name := fmt.Sprint(get(m, "name"))
		v, ok := vols[name]
		if !ok {
			t.Errorf("volumeMount %s has no volume", name)
			continue
		}
		if ref := get(v, "configMap", "name"); ref != nil {
			if ref != cmName {
				t.Errorf("volume %s refers to ConfigMap %v; the ConfigMap is %s", name, ref, cmName)
			}
			for _, it := range get(v, "configMap", "items").([]any) {
				if filepath.Join(fmt.Sprint(get(m, "mountPath")), fmt.Sprint(get(it, "path"))) == configFile {
					found = true
					if cmData[fmt.Sprint(get(it, "key"))] == nil {
						t.Errorf("ConfigMap has no key %v", get(it, "key"))
					}
				}
			}
		}
	}
	if !found {
		t.Errorf("--config=%s is not a file mounted from the ConfigMap", configFile)
	}
	checkTokenMount(t, c, vols, flags["http-token-file"])
	// The actions file in the ConfigMap is valid.
	f := filepath.Join(t.TempDir(), "onceflight.yaml")
	if err := os.WriteFile(f, []byte(fmt.Sprint(cmData["onceflight.yaml"])), 0o644); err != nil {
		t.Fatal(err)
	}
	runOK(t, bin, "config", "validate", f)
}

// checkTokenMount checks that file (--http-token-file) is an item of a
// Secret volume mounted into container c, with a mode serve accepts
// (owner and group only) that the pod's fsGroup can read.
func checkTokenMount(t *testing.T, c any, vols map[string]any, file string) {
	t.Helper()
	if file == "" {
		t.Error("no --http-token-file")
		return
	}
	for _, m := range get(c, "volumeMounts").([]any) {
		v := vols[fmt.Sprint(get(m, "name"))]
		if get(v, "secret") == nil {
			continue
		}
		for _, it := range get(v, "secret", "items").([]any) {
			if filepath.Join(fmt.Sprint(get(m, "mountPath")), fmt.Sprint(get(it, "path"))) != file {
				continue
			}
			mode, _ := get(v, "secret", "defaultMode").(uint64)
			if mode != 0o440 && mode != 0o400 {
				t.Errorf("--http-token-file %s is mounted with mode %o; serve refuses a token file others may read (want 0440)", file, mode)
			}
			return
		}
	}
	t.Errorf("--http-token-file %s is not a file mounted from a Secret", file)
}

// TestKubernetesOAuth2Proxy checks the oauth2-proxy component: serve's
// --http is reachable only inside the pod, it trusts X-Forwarded-User only
// from there, and the sidecar forwards to that address with the user's
// name. Where kubectl is installed, kustomize builds an overlay with it.
func TestKubernetesOAuth2Proxy(t *testing.T) {
	comp := parseYAML(t, "kubernetes/oauth2-proxy/kustomization.yaml")
	if comp["kind"] != "Component" {
		t.Errorf("oauth2-proxy is a %v, want a kustomize Component (an overlay cannot live inside its base)", comp["kind"])
	}
	containers := map[string]any{}
	var svcPorts []any
	for _, p := range get(comp, "patches").([]any) {
		d := parseYAML(t, filepath.Join("kubernetes/oauth2-proxy", fmt.Sprint(get(p, "path"))))
		switch d["kind"] {
		case "StatefulSet":
			for _, c := range get(d, "spec", "template", "spec", "containers").([]any) {
				containers[fmt.Sprint(get(c, "name"))] = c
			}
		case "Service":
			svcPorts, _ = get(d, "spec", "ports").([]any)
		}
	}
	serve, proxy := containers["onceflight"], containers["oauth2-proxy"]
	if serve == nil || proxy == nil {
		t.Fatalf("the StatefulSet patch lacks the onceflight or the oauth2-proxy container: %v", containers)
	}
	args := strs(get(serve, "args"))
	checkArgs(t, "oauth2-proxy component: serve args", args)
	f := checkHTTPAccess(t, "oauth2-proxy component: serve args", args)
	if !httpauth.Loopback(f["http"]) {
		t.Errorf("--http %s: behind the sidecar it should listen on 127.0.0.1 only", f["http"])
	}
	if f["http-trusted-proxy-header"] != "X-Forwarded-User" || f["http-trusted-proxies"] != "127.0.0.1" {
		t.Errorf("serve trusts %q from %q, want X-Forwarded-User from 127.0.0.1 (the sidecar)", f["http-trusted-proxy-header"], f["http-trusted-proxies"])
	}
	pf := flagValues(strs(get(proxy, "args")))
	if pf["upstream"] != "http://"+f["http"]+"/" || pf["pass-user-headers"] != "true" {
		t.Errorf("oauth2-proxy --upstream %q --pass-user-headers %q, want http://%s/ and true", pf["upstream"], pf["pass-user-headers"], f["http"])
	}
	if img := fmt.Sprint(get(proxy, "image")); !regexp.MustCompile(`:v\d+\.\d+\.\d+$`).MatchString(img) {
		t.Errorf("oauth2-proxy image %q is not pinned to a version", img)
	}
	port := portOf(t, "oauth2-proxy --http-address", pf["http-address"])
	found := false
	for _, p := range svcPorts {
		if get(p, "name") == "oauth" && fmt.Sprint(get(p, "targetPort")) == "oauth" {
			found = true
		}
	}
	if !found || fmt.Sprint(get(proxy, "ports", 0, "containerPort")) != port {
		t.Errorf("the Service port oauth does not reach the sidecar's %s: %v", port, svcPorts)
	}

	kubectl, err := exec.LookPath("kubectl")
	if err != nil {
		t.Log("kubectl not found: the component is not built with kustomize")
		return
	}
	// An overlay outside deploy/kubernetes, as a user writes it.
	dir, err := os.MkdirTemp(".", "overlay-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	if err := os.WriteFile(filepath.Join(dir, "kustomization.yaml"), []byte("resources: [../kubernetes]\ncomponents: [../kubernetes/oauth2-proxy]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out := runOK(t, kubectl, "kustomize", dir)
	for _, want := range []string{"name: oauth2-proxy", "--http=127.0.0.1:8080", "--http-trusted-proxies=127.0.0.1", "name: oauth\n", "secretName: onceflight-http-tokens"} {
		if !strings.Contains(out, want) {
			t.Errorf("kustomize build of the component lacks %q:\n%s", want, out)
		}
	}
}

func TestSystemdUnit(t *testing.T) {
	raw := readFile(t, "systemd/onceflight@.service")
	raw = strings.ReplaceAll(raw, "\\\n", " ")
	var exec []string
	for line := range strings.SplitSeq(raw, "\n") {
		if v, ok := strings.CutPrefix(line, "ExecStart="); ok {
			exec = strings.Fields(v)
		}
		if v, ok := strings.CutPrefix(line, "Environment="); ok {
			name, _, _ := strings.Cut(v, "=")
			checkEnv(t, "systemd Environment", "serve", name)
		}
	}
	if len(exec) < 2 || filepath.Base(exec[0]) != "onceflight" {
		t.Fatalf("ExecStart %q does not run onceflight", exec)
	}
	checkArgs(t, "systemd ExecStart", exec[1:])
	checkHTTPAccess(t, "systemd ExecStart", exec[1:])
	// Instances get distinct, valid HTTP ports however many there are
	// (808%i broke at instance 10).
	i := slices.Index(exec, "--http")
	if i < 0 || i+1 >= len(exec) {
		t.Fatal("ExecStart has no --http")
	}
	ports := map[string]bool{}
	for _, inst := range []string{"8081", "8082", "8099", "18080"} {
		addr := strings.ReplaceAll(exec[i+1], "%i", inst)
		_, port, _ := strings.Cut(addr, ":")
		n, err := strconv.Atoi(port)
		if err != nil || n < 1 || n > 65535 || ports[port] {
			t.Errorf("instance %s: --http %s is not a distinct valid address", inst, addr)
		}
		ports[port] = true
	}
}

func TestDockerfile(t *testing.T) {
	raw := readFile(t, "../Dockerfile")
	var froms []string
	var entry string
	for line := range strings.SplitSeq(raw, "\n") {
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		switch f[0] {
		case "FROM":
			froms = append(froms, f[1])
		case "ENTRYPOINT":
			var e []string
			if err := json.Unmarshal([]byte(strings.TrimPrefix(line, "ENTRYPOINT ")), &e); err != nil || len(e) == 0 {
				t.Fatalf("ENTRYPOINT %q: %v", line, err)
			}
			entry = e[0]
		case "CMD":
			var c []string
			if err := json.Unmarshal([]byte(strings.TrimPrefix(line, "CMD ")), &c); err != nil {
				t.Fatalf("CMD %q: %v", line, err)
			}
			checkArgs(t, "Dockerfile CMD", c)
			if m := checkHTTPAccess(t, "Dockerfile CMD", c)["metrics-http"]; m == "" || !strings.Contains(raw, "EXPOSE "+portOf(t, "--metrics-http", m)) {
				t.Errorf("Dockerfile CMD: --metrics-http %q is not EXPOSEd", m)
			}
		}
	}
	if len(froms) < 2 {
		t.Fatalf("not a multi-stage build: FROM %v", froms)
	}
	last := froms[len(froms)-1]
	if !strings.HasPrefix(last, "gcr.io/distroless/static") && last != "scratch" {
		t.Errorf("final stage %s is neither distroless/static nor scratch", last)
	}
	// The builder's Go satisfies go.mod.
	gomod := readFile(t, "../go.mod")
	want := regexp.MustCompile(`(?m)^go (\d+\.\d+)`).FindStringSubmatch(gomod)
	have := regexp.MustCompile(`^golang:(\d+\.\d+)`).FindStringSubmatch(froms[0])
	if want == nil || have == nil || !versionAtLeast(have[1], want[1]) {
		t.Errorf("builder %s does not provide go.mod's go %v", froms[0], want)
	}
	for _, must := range []string{"CGO_ENABLED=0", "./cmd/onceflight", "COPY --from=build /out/onceflight " + entry, "USER 65532"} {
		if !strings.Contains(raw, must) {
			t.Errorf("Dockerfile lacks %q", must)
		}
	}
}

func versionAtLeast(have, want string) bool {
	h := strings.Split(have, ".")
	w := strings.Split(want, ".")
	for i := range 2 {
		a, _ := strconv.Atoi(h[i])
		b, _ := strconv.Atoi(w[i])
		if a != b {
			return a > b
		}
	}
	return true
}

// metricRe finds the executor's metric names in PromQL.
var metricRe = regexp.MustCompile(`\bonceflight_[a-z0-9_]+`)

// TestQueriesUseExportedMetrics runs an executor on the embedded broker,
// answers one command so every metric family has a sample, and checks that
// each onceflight_* name in the dashboard, the alert rules and the metrics
// table of docs/http.md is on its /metrics.
func TestQueriesUseExportedMetrics(t *testing.T) {
	exported := scrapeExecutor(t)
	var d struct {
		Panels []struct {
			Title   string
			Targets []struct{ Expr string }
		}
		Templating struct {
			List []struct {
				Definition string
			}
		}
	}
	if err := json.Unmarshal([]byte(readFile(t, "observability/dashboard.json")), &d); err != nil {
		t.Fatalf("dashboard.json: %v", err)
	}
	queries := map[string]string{}
	for _, p := range d.Panels {
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for i, tg := range p.Targets {
			queries[fmt.Sprintf("dashboard panel %q #%d", p.Title, i)] = tg.Expr
		}
	}
	for i, v := range d.Templating.List {
		queries[fmt.Sprintf("dashboard variable #%d", i)] = v.Definition
	}
	var rules struct {
		Groups []struct {
			Rules []struct{ Alert, Expr string }
		}
	}
	if err := yaml.Unmarshal([]byte(readFile(t, "observability/alerts.yaml")), &rules); err != nil {
		t.Fatal(err)
	}
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			queries["alert "+r.Alert] = r.Expr
		}
	}
	// The reference users read names only real metrics too.
	queries["docs/http.md"] = readFile(t, "../docs/http.md")
	n := 0
	for where, q := range queries {
		for _, name := range metricRe.FindAllString(q, -1) {
			n++
			if !exported[name] {
				t.Errorf("%s uses %s, which the executor does not export", where, name)
			}
		}
	}
	if n < 20 {
		t.Errorf("only %d metric references found in the dashboard and alerts", n)
	}
}

// scrapeExecutor returns the metric names (with the _bucket/_sum/_count
// series of histograms) on a running executor's /metrics.
func scrapeExecutor(t *testing.T) map[string]bool {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dir := t.TempDir()
	cfg := filepath.Join(dir, "onceflight.yaml")
	if err := os.WriteFile(cfg, []byte("actions:\n  noop.ping:\n    connector: noop\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	broker := start(t, "broker", "--listen", "127.0.0.1:0", "--data-dir", filepath.Join(dir, "broker"))
	addr := waitLine(t, ctx, broker, regexp.MustCompile(`broker listening on (\S+),`))
	serve := start(t, "serve", "--brokers", addr, "--config", cfg, "--data-dir", filepath.Join(dir, "state"),
		"--http", "127.0.0.1:0", "--metrics-http", "127.0.0.1:0", "--partitions", "1", "--executor-id", "deploy-test", "--session-timeout", "6s")
	// Prometheus scrapes the open --metrics-http listener: it must have
	// every metric (and answers /readyz) without credentials.
	httpAddr := waitLine(t, ctx, serve, regexp.MustCompile(`msg="health and metrics listening" addr=(\S+)`))
	// Ready means the topics exist and the partitions are assigned, so
	// the command below is consumed.
	if _, err := proctest.WaitReady(ctx, serve, httpAddr, 100*time.Millisecond); err != nil {
		t.Fatalf("executor not ready: %v\n%s", err, serve.Tail(30))
	}
	out, err := exec.CommandContext(ctx, bin, "submit", "--brokers", addr, "--action", "noop.ping", "--entity", "e-1", "--wait").CombinedOutput()
	if err != nil {
		t.Fatalf("submit --wait: %v\n%s", err, out)
	}
	// Gauges refreshed on a timer (lag, every second) appear within a
	// refresh of the partitions being owned.
	var names map[string]bool
	for range 50 {
		names = scrapeNames(t, httpAddr)
		if names["onceflight_commands_total"] && names["onceflight_consumer_lag"] {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	if !names["onceflight_commands_total"] {
		t.Fatalf("the executor's /metrics has no onceflight_commands_total after a command: %v", names)
	}
	return names
}

// start runs the binary's command args[0] until the test ends.
func start(t *testing.T, args ...string) *proctest.Proc {
	t.Helper()
	p, err := proctest.Start(t.TempDir(), args[0], bin, args...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Stop(30 * time.Second) })
	return p
}

// waitLine returns re's first group in the first matching line of p's
// output.
func waitLine(t *testing.T, ctx context.Context, p *proctest.Proc, re *regexp.Regexp) string {
	t.Helper()
	m, err := p.WaitLog(ctx, re)
	if err != nil {
		t.Fatalf("%v; output:\n%s", err, p.Log())
	}
	return m[1]
}

// scrapeNames lists the metric names (and histogram series) on /metrics.
func scrapeNames(t *testing.T, httpAddr string) map[string]bool {
	t.Helper()
	resp, err := http.Get("http://" + httpAddr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	names := map[string]bool{}
	typeRe := regexp.MustCompile(`^# TYPE (\S+) (\S+)`)
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		m := typeRe.FindStringSubmatch(sc.Text())
		if m == nil {
			continue
		}
		names[m[1]] = true
		if m[2] == "histogram" || m[2] == "summary" {
			for _, s := range []string{"_bucket", "_sum", "_count"} {
				names[m[1]+s] = true
			}
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return names
}
