package main

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
)

// row is one line of the result table. Zero values print as "-": a phase
// that did not measure something says so instead of showing a 0.
type row struct {
	Phase   string  `json:"phase"`
	Measure string  `json:"measure"`
	Value   float64 `json:"value"`
	Unit    string  `json:"unit"`
	// Vs names the baseline the ratio is taken against.
	Vs    string  `json:"vs,omitempty"`
	Ratio float64 `json:"ratio,omitempty"`
	// Goal is issue 8's target for this ratio or value, and Met whether
	// this run reached it ("yes", "no", or "" when there is no goal).
	Goal string `json:"goal,omitempty"`
	Met  string `json:"met,omitempty"`
	// CPUPerCmd is µs of user+sys CPU of the measured process per command
	// over the measured window.
	CPUPerCmd float64 `json:"cpu_us_per_cmd,omitempty"`
	RSSMB     float64 `json:"peak_rss_mb,omitempty"`
	// Log counts ERROR and WARN lines the executor logged in the phase.
	Log   string `json:"log,omitempty"`
	Audit string `json:"audit,omitempty"`
	Note  string `json:"note,omitempty"`
}

// report is everything one run prints: the context needed to compare it
// with another run, and the rows.
type report struct {
	Started  time.Time `json:"started"`
	Commit   string    `json:"commit"`
	Host     string    `json:"host"`
	CPUs     int       `json:"cpus"`
	Args     string    `json:"args"`
	Brokers  string    `json:"brokers"`
	Rows     []row     `json:"rows"`
	Problems []string  `json:"problems,omitempty"`
}

// goalAtLeast and goalAtMost fill Goal and Met for a ratio (or value) v.
func goalAtLeast(r *row, v, min float64, label string) {
	r.Goal = "≥ " + label
	r.Met = yesNo(v >= min)
}

func goalAtMost(r *row, v, max float64, label string) {
	r.Goal = "≤ " + label
	r.Met = yesNo(v <= max)
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

// ratio is a/b, or 0 (printed "-") when either side was not measured.
func ratio(a, b float64) float64 {
	if a <= 0 || b <= 0 || math.IsNaN(a) || math.IsNaN(b) {
		return 0
	}
	return a / b
}

// percentile returns the p-th percentile (0 < p <= 100) of ds by the
// nearest-rank method: the smallest sample such that at least p % of the
// samples are at or below it. Nearest rank never invents a value between
// two samples, which matters for a p99 over a few hundred samples. ds need
// not be sorted and is not modified.
func percentile(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	rank := int(math.Ceil(p / 100 * float64(len(s))))
	rank = max(1, min(rank, len(s)))
	return s[rank-1]
}

// ms converts d to float milliseconds for the table.
func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// fmtNum prints a figure with three significant digits and thin-space
// thousands grouping, the style BENCHMARKS.md already uses; 0 is "-".
func fmtNum(v float64) string {
	if v == 0 || math.IsNaN(v) || math.IsInf(v, 0) {
		return "-"
	}
	a := math.Abs(v)
	switch {
	case a >= 999.5:
		return group(strconv.FormatFloat(math.Round(v), 'f', 0, 64))
	case a >= 100:
		return strconv.FormatFloat(v, 'f', 0, 64)
	case a >= 10:
		return strconv.FormatFloat(v, 'f', 1, 64)
	case a >= 1:
		return strconv.FormatFloat(v, 'f', 2, 64)
	default:
		return strconv.FormatFloat(v, 'f', 3, 64)
	}
}

// group inserts a space every three digits of an integer string.
func group(s string) string {
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(' ')
		}
		b.WriteRune(c)
	}
	if neg {
		return "-" + b.String()
	}
	return b.String()
}

func fmtRatio(v float64) string {
	if v == 0 {
		return "-"
	}
	return fmtNum(v) + "×"
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

var tableHeader = []string{"phase", "measure", "value", "unit", "vs", "ratio", "goal", "met", "cpu µs/cmd", "peak RSS MB", "log err/warn", "audit", "note"}

// cells renders r in the order of tableHeader.
func (r row) cells() []string {
	return []string{
		r.Phase, r.Measure, fmtNum(r.Value), r.Unit, dash(r.Vs), fmtRatio(r.Ratio),
		dash(r.Goal), dash(r.Met), fmtNum(r.CPUPerCmd), fmtNum(r.RSSMB), dash(r.Log), dash(r.Audit), r.Note,
	}
}

// writeText prints the run's header and its one table, aligned for a
// terminal.
func (rep *report) writeText(w io.Writer) error {
	fmt.Fprintf(w, "onceflight-bench %s  commit %s  host %s  %d CPUs\nargs: %s\nbrokers: %s\n\n",
		rep.Started.Format(time.RFC3339), rep.Commit, rep.Host, rep.CPUs, rep.Args, rep.Brokers)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, strings.Join(tableHeader, "\t"))
	for _, r := range rep.Rows {
		fmt.Fprintln(tw, strings.Join(r.cells(), "\t"))
	}
	if err := tw.Flush(); err != nil {
		return fmt.Errorf("write table: %w", err)
	}
	if len(rep.Problems) > 0 {
		fmt.Fprintln(w, "\nproblems:")
		for _, p := range rep.Problems {
			fmt.Fprintln(w, "  -", p)
		}
	}
	return nil
}

// writeMarkdown prints the table as GitHub markdown, for BENCHMARKS.md.
func (rep *report) writeMarkdown(w io.Writer) error {
	var b strings.Builder
	b.WriteString("| " + strings.Join(tableHeader, " | ") + " |\n|")
	for range tableHeader {
		b.WriteString("---|")
	}
	b.WriteString("\n")
	for _, r := range rep.Rows {
		c := r.cells()
		for i := range c {
			c[i] = strings.ReplaceAll(c[i], "|", `\|`)
		}
		b.WriteString("| " + strings.Join(c, " | ") + " |\n")
	}
	if _, err := io.WriteString(w, b.String()); err != nil {
		return fmt.Errorf("write markdown: %w", err)
	}
	return nil
}

func (rep *report) writeJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	if err := enc.Encode(rep); err != nil {
		return fmt.Errorf("write json: %w", err)
	}
	return nil
}
