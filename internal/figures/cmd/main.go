// Command figures regenerates the README's "Measured figures" table from
// fresh runs of the commands it quotes (docs/figures.md). `make figures`
// runs it:
//
//	go run ./internal/figures/cmd --capbench bin/capbench
//
// It prints the table, keeps every run's raw output under --out, and
// rewrites README.md between its markers only when every row succeeded.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"regexp"
	"syscall"
	"time"

	"github.com/capbench/capbench/internal/figures"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "figures:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("figures", flag.ContinueOnError)
	fs.SetOutput(stderr)
	readme := fs.String("readme", "README.md", "the README whose figures table is rewritten (between its figures markers)")
	out := fs.String("out", filepath.Join("capbench-out", "figures"), "folder for every run's raw output (one folder per run)")
	capbench := fs.String("capbench", filepath.Join("bin", "capbench"), "the capbench binary the capbench rows run (make build writes it)")
	goTool := fs.String("go", envOr("GO", "go"), "the go tool the benchmark rows run")
	rows := fs.String("rows", "", "regexp: only the rows whose name matches (README.md is then not written)")
	skip := fs.String("skip", "", "regexp: leave out the rows whose name matches, e.g. chaos (README.md is then not written)")
	dry := fs.Bool("dry-run", false, "print each run's command and stop")
	from := fs.String("from", "", "render from the raw outputs an earlier run left in this folder instead of running anything")
	timeout := fs.Duration("timeout", 30*time.Minute, "limit for each run")
	quiet := fs.Bool("quiet", false, "do not copy the runs' output to stderr as it comes")
	list := fs.Bool("list", false, "list the rows' names and commands and stop")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected argument %q (flags only; see -h)", fs.Arg(0))
	}
	all := figures.Rows()
	if *list {
		for _, r := range all {
			fmt.Fprintf(stdout, "%-22s %s\n", r.Name, r.CommandText())
		}
		return nil
	}
	cfg := figures.Config{README: *readme, OutDir: *out, DryRun: *dry, Stdout: stdout, Stderr: stderr}
	if *rows != "" {
		re, err := regexp.Compile(*rows)
		if err != nil {
			return fmt.Errorf("--rows: %w", err)
		}
		cfg.Rows = re
	}
	if *skip != "" {
		re, err := regexp.Compile(*skip)
		if err != nil {
			return fmt.Errorf("--skip: %w", err)
		}
		cfg.Skip = re
	}
	root, err := os.Getwd()
	if err != nil {
		return err
	}
	bin, err := filepath.Abs(*capbench)
	if err != nil {
		return fmt.Errorf("--capbench: %w", err)
	}
	ex := figures.Exec{Root: root, Go: *goTool, Capbench: bin, Timeout: *timeout}
	if !*quiet {
		ex.Echo = stderr
	}
	cfg.Show, cfg.Runner = ex.Show, ex
	switch {
	case *from != "":
		cfg.OutDir, cfg.Runner = *from, figures.Saved{Dir: *from}
	case !*dry:
		if _, err := os.Stat(bin); err != nil && needsCapbench(cfg.Rows, cfg.Skip, all) {
			return fmt.Errorf("--capbench %s: %w (run make build, or point --capbench at a capbench binary)", *capbench, errors.Unwrap(err))
		}
	}
	return figures.Generate(ctx, cfg, all)
}

func needsCapbench(re, skip *regexp.Regexp, rows []figures.Row) bool {
	for _, r := range rows {
		if (re != nil && !re.MatchString(r.Name)) || (skip != nil && skip.MatchString(r.Name)) {
			continue
		}
		for _, run := range r.Runs {
			if run.Kind != figures.GoTest {
				return true
			}
		}
	}
	return false
}

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}
