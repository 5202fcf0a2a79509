// Package deploy holds no code. Its tests check the deployment files next
// to it — the Dockerfile, the compose stack, the Kubernetes manifests, the
// systemd unit, the Grafana dashboard and the Prometheus alert rules —
// against the binary they deploy: every flag they pass exists, every file
// and metric they name is there, and the alert rules pass promtool.
package deploy
