package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/ilbproject/ilb/xds"
)

// runRollout prints each source's xDS rollout from the admin API: the
// stable version, the canary soaking (if any), the versions Envoys
// rejected and which Envoy holds what.
func runRollout(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) > 0 && isHelp(args[0]) {
		fmt.Fprintln(stderr, "Usage: ilb rollout status [--source NAME] [admin flags]: each source's xDS rollout (ilb rollout status -h for the flags)")
		return exitError{0}
	}
	if len(args) == 0 || args[0] != "status" {
		return fmt.Errorf("rollout: want the subcommand \"status\", got %q", strings.Join(args, " "))
	}
	fs := flag.NewFlagSet("rollout status", flag.ContinueOnError)
	af := addAdminFlags(fs)
	source := fs.String("source", "", "only this source")
	if err := parse(fs, args[1:], stderr); err != nil {
		return err
	}
	var v []xds.RolloutStatus
	client, err := af.client()
	if err != nil {
		return fmt.Errorf("rollout: %w", err)
	}
	if err := client.getJSON(ctx, "/debug/rollout", &v); err != nil {
		return fmt.Errorf("rollout: %w", err)
	}
	if *source != "" && !slices.ContainsFunc(v, func(r xds.RolloutStatus) bool { return r.Source == *source }) {
		known := make([]string, 0, len(v))
		for _, r := range v {
			known = append(known, r.Source)
		}
		return fmt.Errorf("rollout: unknown source %q; known sources: %s", *source, listOrNone(known))
	}
	printRollouts(stdout, v, *source, time.Now())
	return nil
}

// typeOrder is the order resource types are printed in.
var typeOrder = []string{"cluster", "endpoint", "route", "listener"}

func printRollouts(w io.Writer, v []xds.RolloutStatus, only string, now time.Time) {
	for _, r := range v {
		if only != "" && r.Source != only {
			continue
		}
		state := "stable"
		if r.Pending {
			state = fmt.Sprintf("canary soaking for %s", age(now, r.Since))
		}
		fmt.Fprintf(w, "source %s: %s\n", r.Source, state)
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "  TYPE\tSTABLE\tCANARY\tROLLBACK TO")
		for _, t := range typeOrder {
			if _, ok := r.Stable[t]; !ok && r.Canary[t] == "" {
				continue
			}
			c := "-"
			if r.Pending && r.Canary[t] != r.Stable[t] {
				c = r.Canary[t]
			}
			g := r.LastGood[t]
			if g == "" {
				g = "-"
			}
			fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\n", t, r.Stable[t], c, g)
		}
		_ = tw.Flush()
		if len(r.Nodes) == 0 {
			fmt.Fprintln(w, "  no Envoy connected")
		} else {
			tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
			fmt.Fprintln(tw, "  NODE\tROLE\tSTREAMS\tACKED\tHELD\tLAST NACK")
			for _, n := range r.Nodes {
				role := "stable"
				if n.Canary {
					role = "canary"
				}
				nack := "-"
				if n.LastNACK != nil {
					nack = fmt.Sprintf("%s %s %s ago: %s", n.LastNACK.Type, n.LastNACK.Version, age(now, n.LastNACK.At), firstLine(n.LastNACK.Message))
				}
				fmt.Fprintf(tw, "  %s\t%s\t%d\t%s\t%s\t%s\n", n.ID, role, n.Streams, acked(n.Acked), held(n.Held), nack)
			}
			_ = tw.Flush()
		}
		for _, x := range r.Rejected {
			by := "a canary (" + x.Node + ")"
			if x.By == "quorum" {
				by = fmt.Sprintf("a quorum (%d of %d Envoys; last %s)", x.Rejectors, x.Connected, x.Node)
			}
			fmt.Fprintf(w, "  banned %s %s by %s %s ago, never sent again: %s\n", x.Type, x.Version, by, age(now, x.At), firstLine(x.Message))
		}
		fmt.Fprintln(w)
	}
}

// held says what a node keeps after rejecting the version in force: it
// gets nothing new of that type until the content changes.
func held(hs []xds.Hold) string {
	if len(hs) == 0 {
		return "-"
	}
	parts := make([]string, len(hs))
	for i, h := range hs {
		keeps := h.Keeps
		if keeps == "" {
			keeps = "none"
		}
		parts[i] = fmt.Sprintf("%s rejected %s, keeps %s", h.Type, h.Rejected, keeps)
	}
	return strings.Join(parts, "; ")
}

func acked(m map[string]string) string {
	var parts []string
	for _, t := range typeOrder {
		if v, ok := m[t]; ok {
			parts = append(parts, t+"="+v)
		}
	}
	if len(parts) == 0 {
		return "-"
	}
	return strings.Join(parts, " ")
}

func firstLine(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i] + " …"
	}
	return s
}
