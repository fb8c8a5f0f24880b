package main

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/urfave/cli/v2"

	"github.com/pegasus-engine/pegasus/eventlog"
	"github.com/pegasus-engine/pegasus/replay"
)

func verifyCommand(std *stdio) *cli.Command {
	return &cli.Command{
		Name:  "verify",
		Usage: "audit the log: re-fold everything from zero and report every problem",
		Description: "On a data directory: every record's checksum, the global sequence gap-free from 1, the\n" +
			"stream/id/causation indexes, every transition legal under the machine that wrote it, every\n" +
			"body decodable, and the persisted projections and snapshots equal to a fresh fold.\n" +
			"On --file or --server: the fold checks only. Exit code 0 when sound, 1 when a problem was\n" +
			"found (the report names the first bad position).\n\n" +
			"With --archive DIR, also re-read every retention archive the log's manifests name and\n" +
			"check its events against the manifest's hash (docs/retention.md).\n\n" +
			"   pegasus-replay -d ./pegasus-data verify\n" +
			"   pegasus-replay -d ./pegasus-data verify --archive ./pegasus-data/archive\n" +
			"   pegasus-replay -f task-bundle.ndjson verify --allow-gaps\n\n" +
			"With --cluster URL, the data directory is a node's copy of a clustered log (pegasusd\n" +
			"--cluster): also check it against the log's JetStream stream, message by message\n" +
			"(docs/cluster.md).\n\n" +
			"   pegasus-replay -d ./pegasus-data --cluster nats://127.0.0.1:4222 verify",
		Flags: []cli.Flag{
			&cli.BoolFlag{Name: "allow-gaps", EnvVars: env("verify", "allow-gaps"),
				Usage: "accept jumps in the global sequence (a filtered export); never for a data directory"},
			&cli.StringFlag{Name: "archive", EnvVars: env("verify", "archive"),
				Usage: "also check the retention archives in `DIR` against the log's manifests"},
			&cli.StringFlag{Name: "cluster-stream", Value: "PEGASUS_LOG", EnvVars: []string{"PEGASUS_CLUSTER_STREAM"},
				Usage: "with --cluster, the clustered log's JetStream `STREAM`"},
		},
		Action: func(c *cli.Context) error {
			if err := exactArgs(c); err != nil {
				return err
			}
			g := readGlobals(c)
			src, err := openSource(c.Context, std, g)
			if g.dataDir != "" && eventlog.IsCorruption(err) {
				// A log too damaged to open is verify's finding, not an
				// unusable source: report it like any other problem.
				return reportVerify(std, g, fmt.Sprintf("data directory %q", g.dataDir), corruptionReport(err), nil)
			}
			if err != nil {
				return err
			}
			defer src.Close()
			if src.log != nil && c.Bool("allow-gaps") {
				return usagef("--allow-gaps is for filtered exports; a data directory must be gap-free")
			}
			bar := newProgress(std, src.head(), "verifying")
			vo := &replay.VerifyOptions{
				// A filtered export says so in its header: its gaps are by design.
				AllowGaps: c.Bool("allow-gaps") || src.partial,
				OnEvent: func(seq uint64) {
					if seq%1024 == 0 {
						bar.set(seq)
					}
				},
				// A data directory's audit has phases before and after the
				// fold (eventlog's own, the persisted projections).
				OnProgress: func(p eventlog.VerifyProgress) {
					bar.phase("verifying: "+p.Phase, p.Done, p.Total)
				},
			}
			var rep *replay.Report
			if src.log != nil {
				rep, err = replay.Verify(c.Context, src.log, vo)
			} else {
				rep, err = replay.VerifySource(c.Context, src.reader, vo)
			}
			bar.done()
			if eventlog.IsCorruption(err) {
				// Corruption met outside the audit's own checks (a bad
				// block in the persisted projections it loads first) is a
				// finding too, in the report like the others.
				return reportVerify(std, g, src.desc, corruptionReport(err), nil)
			}
			if err != nil {
				return err
			}
			if dir := c.String("archive"); dir != "" {
				ar, err := replay.VerifyArchives(c.Context, src.reader, vfs.Default, dir)
				if err != nil {
					return err
				}
				rep.AddArchives(ar)
			}
			var cc *clusterCopy
			if g.cluster != "" {
				if src.log == nil {
					return usagef("--cluster checks a data directory (a node's copy) against the stream")
				}
				if cc, err = verifyClusterCopy(c.Context, src.log, g.cluster, c.String("cluster-stream")); err != nil {
					return err
				}
			}
			return reportVerify(std, g, src.desc, rep, cc)
		},
	}
}

// reportVerify prints rep and the cluster check cc if any (human or
// --json) and returns errProblems when either found one, for exit code 1.
func reportVerify(std *stdio, g globals, desc string, rep *replay.Report, cc *clusterCopy) error {
	var err error
	p := newPrinter(std, g)
	if p.json {
		if rep.Problems == nil {
			rep.Problems = []replay.Problem{}
		}
		j := verifyJSON{OK: rep.OK() && (cc == nil || cc.Problem == ""), Source: desc, Report: rep, Cluster: cc}
		if l := rep.Log; l != nil {
			j.Log = &logAuditJSON{Head: l.Head, Records: l.Events, Streams: l.Streams, StreamEntries: l.StreamEntries,
				IDEntries: l.IDEntries, CausationEntries: l.CausationEntries, AuxKeys: l.AuxKeys, ProblemCount: l.ProblemCount}
		}
		err = p.JSON(j)
	} else {
		printVerify(p, desc, rep)
		if cc != nil {
			printClusterCopy(p, cc)
		}
	}
	if err == nil && (!rep.OK() || (cc != nil && cc.Problem != "")) {
		return errProblems
	}
	return err
}

// corruptionReport is the report on a data directory the log refused to
// open because it is damaged (a corrupt WAL, a missing MANIFEST, a table
// Pebble cannot read), or whose audit met corruption it could not report
// itself: one log problem naming the file and the offset.
func corruptionReport(err error) *replay.Report {
	pr := replay.Problem{Kind: replay.ProblemLog, Reason: err.Error()}
	var ce *eventlog.CorruptionError
	if errors.As(err, &ce) {
		pr.Seq, pr.Reason = ce.Seq, ce.Error()
	}
	rep := &replay.Report{Problems: []replay.Problem{pr}, ProblemCount: 1}
	rep.FirstProblem = &rep.Problems[0]
	return rep
}

// verifyJSON is the --json output of verify: replay.Report's fields with
// ok and source added.
type verifyJSON struct {
	OK     bool   `json:"ok"`
	Source string `json:"source"`
	*replay.Report
	// Log shadows Report.Log (eventlog.Report has no JSON names) with a
	// stable snake_case shape. Its problems are in problems, kind "log".
	Log *logAuditJSON `json:"log,omitempty"`
	// Cluster is --cluster's check of the copy against the stream.
	Cluster *clusterCopy `json:"cluster,omitempty"`
}

// logAuditJSON is eventlog's own audit in verify --json.
type logAuditJSON struct {
	Head             uint64 `json:"head"`
	Records          uint64 `json:"records"`
	Streams          uint64 `json:"streams"`
	StreamEntries    uint64 `json:"stream_index_entries"`
	IDEntries        uint64 `json:"id_index_entries"`
	CausationEntries uint64 `json:"causation_index_entries"`
	AuxKeys          uint64 `json:"aux_keys"`
	ProblemCount     int    `json:"problem_count"`
}

func printVerify(p *printer, desc string, r *replay.Report) {
	p.Printf("verify %s\n", desc)
	t := newTable()
	t.row("events", fmt.Sprintf("%d (head %d)", r.Events, r.Head))
	t.row("tasks", strconv.Itoa(r.Tasks))
	t.row("refused", strconv.Itoa(r.Refused))
	switch {
	case r.Checkpoint != 0:
		s := fmt.Sprintf("persisted at seq %d equal to a fresh fold there", r.Checkpoint)
		if r.ProjectionsNote != "" {
			s += "; " + r.ProjectionsNote
		}
		t.row("projections", s)
	case r.ProjectionsNote != "":
		t.row("projections", r.ProjectionsNote)
	}
	if r.Log != nil && r.Log.Holes > 0 {
		t.row("retention", fmt.Sprintf("%d events archived in %d hole(s), each recorded by its manifest", r.Log.Retired, r.Log.Holes))
	}
	if a := r.Archives; a != nil {
		s := fmt.Sprintf("%d archive(s), %d events re-read against their manifests' hashes", a.Manifests, a.Events)
		if len(a.Orphans) > 0 {
			s += fmt.Sprintf("; %d orphan(s) of crashed runs: %s", len(a.Orphans), strings.Join(a.Orphans, ", "))
		}
		t.row("archives", s)
	}
	if r.Snapshots > 0 {
		t.row("snapshots", fmt.Sprintf("%d compared", r.Snapshots))
	}
	if r.Log != nil {
		t.row("log audit", fmt.Sprintf("%d records, %d streams, %d id / %d stream / %d causation index entries",
			r.Log.Events, r.Log.Streams, r.Log.IDEntries, r.Log.StreamEntries, r.Log.CausationEntries))
	}
	d := r.Duration.Round(time.Millisecond)
	if r.Duration < time.Second {
		d = r.Duration.Round(time.Microsecond)
	}
	t.row("duration", fmt.Sprintf("%s (%s events/s)", d, groupDigits(int64(r.EventsPerSecond))))
	_ = t.print(p)
	p.Printf("\n")
	if r.OK() {
		p.Printf("%s\n", p.paint(green, r.Summary()))
		return
	}
	p.Printf("%s\n", p.paint(red, "FAILED: "+r.Summary()))
	p.Printf("\n")
	pt := newTable("SEQ", "KIND", "STREAM", "TYPE", "PROBLEM")
	for _, pr := range r.Problems {
		seq := "-"
		if pr.Seq != 0 {
			seq = strconv.FormatUint(pr.Seq, 10)
		}
		reason := pr.Reason
		if pr.Key != "" {
			reason += " (key " + pr.Key + ")"
		}
		pt.rowc(cell{text: seq}, cell{text: string(pr.Kind), c: red}, cell{text: orDash(pr.Stream)},
			cell{text: orDash(pr.Type)}, cell{text: reason})
	}
	_ = pt.print(p)
	if r.ProblemCount > len(r.Problems) {
		p.Printf("... and %d more (%d in all)\n", r.ProblemCount-len(r.Problems), r.ProblemCount)
	}
}

// groupDigits writes 1234567 as 1,234,567.
func groupDigits(n int64) string {
	s := strconv.FormatInt(n, 10)
	neg := n < 0
	if neg {
		s = s[1:]
	}
	var out []byte
	for i := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			out = append(out, ',')
		}
		out = append(out, s[i])
	}
	if neg {
		return "-" + string(out)
	}
	return string(out)
}
