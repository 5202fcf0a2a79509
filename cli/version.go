package cli

import (
	"fmt"
	"runtime/debug"
	"strings"

	"github.com/spf13/cobra"
)

// version is the release version, set by the release build with -ldflags
// "-X github.com/onceflight/onceflight/cli.version=v1.2.3" (the Makefile
// passes VERSION; a binary of your own on Main takes the same flag). A
// plain `go build` leaves it empty and buildVersion falls back on what the
// Go toolchain recorded, so every binary can say what it was built from.
var version string

// revision is the VCS revision when the toolchain could not stamp one (a
// build outside a git checkout, such as a Docker build context without
// .git): the Makefile passes it with -X .../cli.revision=... as well.
var revision string

// buildInfo is what `onceflight version` prints.
type buildInfo struct {
	Version   string // release version, module version, or "dev"
	Revision  string // VCS revision, with "-dirty" when built from a modified tree; "unknown" without VCS info
	GoVersion string
}

// readBuildInfo combines the -X version with runtime/debug's build info:
// `go install ...@v1.2.3` records the module version, a build inside a git
// checkout records the revision.
func readBuildInfo() buildInfo {
	bi := buildInfo{Version: version, Revision: revision}
	if bi.Revision == "" {
		bi.Revision = "unknown"
	}
	info, ok := debug.ReadBuildInfo()
	if !ok {
		if bi.Version == "" {
			bi.Version = "dev"
		}
		return bi
	}
	bi.GoVersion = info.GoVersion
	if bi.Version == "" && info.Main.Version != "" && info.Main.Version != "(devel)" {
		bi.Version = info.Main.Version
	}
	if bi.Version == "" {
		bi.Version = "dev"
	}
	var rev string
	var dirty bool
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			dirty = s.Value == "true"
		}
	}
	if rev != "" {
		bi.Revision = rev
		if dirty {
			bi.Revision += "-dirty"
		}
	}
	return bi
}

// String is the one line `version` and `--version` print.
func (b buildInfo) String() string {
	parts := []string{"onceflight " + b.Version, "revision " + b.Revision}
	if b.GoVersion != "" {
		parts = append(parts, b.GoVersion)
	}
	return strings.Join(parts, ", ")
}

func newVersionCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the version, VCS revision and Go version of this binary",
		Args:  args(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			_, err := fmt.Fprintln(cmd.OutOrStdout(), readBuildInfo())
			return err
		},
	}
}
