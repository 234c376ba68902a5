package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/tpdeploy/tpdeploy/internal/control"
)

const scheduleUsage = `schedule create CLUSTER -f spec.yaml --every 24h | --cron 'EXPR'
       starter schedule list [--json]
       starter schedule pause|unpause CLUSTER [--note TEXT]
       starter schedule delete CLUSTER`

func cmdSchedule(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprintf(stderr, "Usage: starter %s\n", scheduleUsage)
		return errUsage
	}
	switch args[0] {
	case "create":
		return scheduleCreate(ctx, args[1:], stdout, stderr)
	case "list":
		return scheduleList(ctx, args[1:], stdout, stderr)
	case "pause", "unpause", "delete":
		return scheduleOp(ctx, args[0], args[1:], stdout, stderr)
	case "-h", "--help", "help":
		fmt.Fprintf(stdout, "Usage: starter %s\n", scheduleUsage)
		return nil
	}
	fmt.Fprintf(stderr, "starter: unknown schedule command %q\nUsage: starter %s\n", args[0], scheduleUsage)
	return errUsage
}

func scheduleCreate(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	c := newCommand("schedule create", "schedule create CLUSTER -f spec.yaml --every 24h | --cron 'EXPR'", stderr)
	file := c.fs.String("f", "", "cluster spec (YAML or JSON)")
	every := c.fs.Duration("every", 0, "redeploy interval, e.g. 24h")
	cron := c.fs.String("cron", "", "cron expression, e.g. '0 3 * * *'")
	cluster, err := c.cluster(args)
	if err != nil {
		return helpOK(err)
	}
	if (*every > 0) == (*cron != "") {
		c.fs.Usage()
		return errUsage
	}
	if *every < 0 {
		return fmt.Errorf("--every %s: must be positive", *every)
	}
	s, ctl, closeFn, err := c.specAndController(*file)
	if err != nil {
		return err
	}
	defer closeFn()
	if s.Name != cluster {
		return fmt.Errorf("%s describes cluster %q, not %q", *file, s.Name, cluster)
	}
	created, err := ctl.Schedule(ctx, s, control.When{Every: *every, Cron: *cron})
	if err != nil {
		return err
	}
	verb := "created"
	if !created {
		verb = "updated"
	}
	fmt.Fprintf(stdout, "schedule %s %s: redeploys %s (overlapping runs skipped, paused on failure)\n", control.ScheduleID(s.Name), verb, s.Name)
	return nil
}

func scheduleList(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	c := newCommand("schedule list", "schedule list [--json]", stderr)
	asJSON := c.fs.Bool("json", false, "print JSON")
	if _, err := c.parse(args); err != nil {
		return helpOK(err)
	}
	ctl, closeFn, err := c.controller()
	if err != nil {
		return err
	}
	defer closeFn()
	list, err := ctl.Schedules(ctx)
	if err != nil {
		return err
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(list)
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "CLUSTER\tWHEN\tSTATE\tNEXT RUN\tLAST RUN")
	for _, e := range list {
		state := "active"
		if e.Paused {
			state = "paused"
			if e.Note != "" {
				state += " (" + e.Note + ")"
			}
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", e.Cluster, e.When, state, clockOrDash(e.NextRun), clockOrDash(e.LastRun))
	}
	return tw.Flush()
}

func clockOrDash(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.Local().Format(time.DateTime)
}

func scheduleOp(ctx context.Context, op string, args []string, stdout, stderr io.Writer) error {
	c := newCommand("schedule "+op, "schedule "+op+" CLUSTER", stderr)
	note := ""
	if op != "delete" {
		c.fs.StringVar(&note, "note", "", "why (shown by schedule list)")
	}
	cluster, err := c.cluster(args)
	if err != nil {
		return helpOK(err)
	}
	ctl, closeFn, err := c.controller()
	if err != nil {
		return err
	}
	defer closeFn()
	switch op {
	case "pause":
		err = ctl.PauseSchedule(ctx, cluster, note)
	case "unpause":
		err = ctl.UnpauseSchedule(ctx, cluster, note)
	default:
		err = ctl.DeleteSchedule(ctx, cluster)
	}
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "schedule of %s: %sd\n", cluster, op)
	return nil
}
