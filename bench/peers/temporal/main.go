// temporal-bench: Temporal equivalents of strand-bench W1, W2 and W3, measured the same way,
// with the official Go SDK (go.temporal.io/sdk). The worker runs in this process (on a
// task queue of its own per run) beside the client that drives the workload, as
// bench/peers/dbos/bench.py does for DBOS.
//
//	temporal-bench --workload w1|w2|w3|setup [--n N] [--concurrency C] [--timeout S]
//	               [--window-ms MS] [--lead-ms MS] [--label TEXT] [--local] [--pollers P] [--json]
//
// Env: TEMPORAL_ADDRESS (127.0.0.1:7233), TEMPORAL_NAMESPACE (default).
//
//	setup  registers the namespace (1 day retention) and waits until the frontend
//	       accepts workflows in it; exits 0 once it does.
//	w1     C clients each start a workflow of three activities (each scheduled, started
//	       and completed in the workflow's history by the server) and wait for its
//	       result (ExecuteWorkflow + Get: request/response). Latency: client start ->
//	       time.Now() taken inside the third activity; rate: completed / (last end -
//	       first start). --local runs the steps as local activities (results recorded as
//	       markers, no task-queue round trip per step) and reports variant "local".
//	w2     N workflows wait on the signal channel "go"; once every one has completed its
//	       first workflow task (it is blocked on the channel), C clients send the
//	       signals. Latency: client send -> time.Now() recorded by a SideEffect right
//	       after the signal was received.
//	w3     N workflows each sleep on a durable timer (workflow.NewTimer) due evenly over
//	       --window-ms, starting --lead-ms from now (the lead leaves time to start them
//	       all; 0, the default: 2 s + 1.5 x N / the rate of an untimed probe of
//	       min(100, max(10, N/20)) such workflows due at once). Each client starts a
//	       workflow and waits until the worker has set its timer before the next.
//	       "timer_set_late" counts the timers the workflow's first task set after they
//	       were due. Lateness: the server's TimerFired event time - due time. Also reported:
//	       the time the workflow ran again (workflow.Now() after the timer: the server's
//	       start time of that workflow task) - due.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"math"
	"math/rand"
	"os"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	sdklog "go.temporal.io/sdk/log"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"
	"google.golang.org/protobuf/types/known/durationpb"
)

func nowMs() float64 { return float64(time.Now().UnixNano()) / 1e6 }

// ---- workflows and activities ------------------------------------------------------

// StepA, StepB, StepC are W1's three steps.
func StepA(ctx context.Context, i int) (int, error) { return i + 1, nil }
func StepB(ctx context.Context, x int) (int, error) { return x * 2, nil }

// EndResult is W1's result: the last step's output and the time taken inside it.
type EndResult struct {
	Y    int     `json:"y"`
	TEnd float64 `json:"t_end"`
}

func StepC(ctx context.Context, y int) (EndResult, error) { return EndResult{Y: y, TEnd: nowMs()}, nil }

// W1 runs the three steps as activities, or as local activities when local is set.
func W1(ctx workflow.Context, i int, local bool) (EndResult, error) {
	var x, y int
	var out EndResult
	if local {
		ctx = workflow.WithLocalActivityOptions(ctx, workflow.LocalActivityOptions{StartToCloseTimeout: 30 * time.Second})
		if err := workflow.ExecuteLocalActivity(ctx, StepA, i).Get(ctx, &x); err != nil {
			return out, err
		}
		if err := workflow.ExecuteLocalActivity(ctx, StepB, x).Get(ctx, &y); err != nil {
			return out, err
		}
		err := workflow.ExecuteLocalActivity(ctx, StepC, y).Get(ctx, &out)
		return out, err
	}
	ctx = workflow.WithActivityOptions(ctx, workflow.ActivityOptions{StartToCloseTimeout: 30 * time.Second})
	if err := workflow.ExecuteActivity(ctx, StepA, i).Get(ctx, &x); err != nil {
		return out, err
	}
	if err := workflow.ExecuteActivity(ctx, StepB, x).Get(ctx, &y); err != nil {
		return out, err
	}
	err := workflow.ExecuteActivity(ctx, StepC, y).Get(ctx, &out)
	return out, err
}

// ResumeResult is W2's result: the time recorded right after the signal arrived.
type ResumeResult struct {
	Got      int     `json:"got"`
	TResumed float64 `json:"t_resumed"`
}

// W2 waits for the signal "go", then records the time in a side effect.
func W2(ctx workflow.Context) (ResumeResult, error) {
	var got int
	workflow.GetSignalChannel(ctx, "go").Receive(ctx, &got)
	var t float64
	if err := workflow.SideEffect(ctx, func(workflow.Context) interface{} { return nowMs() }).Get(&t); err != nil {
		return ResumeResult{}, err
	}
	return ResumeResult{Got: got, TResumed: t}, nil
}

// TimerResult is W3's result: workflow.Now() when the workflow set its timer and when it
// ran again after it.
type TimerResult struct {
	SetMs float64 `json:"set_ms"`
	NowMs float64 `json:"now_ms"`
}

// timerSet maps a W3 workflow id to a channel closed once this process's worker has set
// its timer (first execution only): each W3 client waits for it before its next start.
var timerSet sync.Map

// W3 sleeps on one durable timer until dueMs (at least 1 ms: a zero duration sets no timer).
func W3(ctx workflow.Context, dueMs float64) (TimerResult, error) {
	set := float64(workflow.Now(ctx).UnixNano()) / 1e6
	d := time.Duration((dueMs - set) * float64(time.Millisecond))
	if d < time.Millisecond {
		d = time.Millisecond
	}
	timer := workflow.NewTimer(ctx, d)
	if !workflow.IsReplaying(ctx) {
		if ch, ok := timerSet.LoadAndDelete(workflow.GetInfo(ctx).WorkflowExecution.ID); ok {
			close(ch.(chan struct{}))
		}
	}
	if err := timer.Get(ctx, nil); err != nil {
		return TimerResult{}, err
	}
	return TimerResult{SetMs: set, NowMs: float64(workflow.Now(ctx).UnixNano()) / 1e6}, nil
}

// ---- driver ------------------------------------------------------------------------

type options struct {
	workload, label    string
	n, conc, timeoutS  int
	windowMs, leadMs   int
	pollers            int
	local, json        bool
	address, namespace string
	deadline           time.Time
}

var opt options

func pct(v []float64, p float64) float64 {
	if len(v) == 0 {
		return 0
	}
	return v[int(p*float64(len(v)-1)+0.5)]
}

func round2(x float64) float64 { return math.Round(x*100) / 100 }

// report prints one result row (JSON with --json) in the shape of the other peers' drivers.
func report(what, unit string, lat []float64, rate float64, extra map[string]any) {
	sort.Float64s(lat)
	row := map[string]any{"engine": "temporal", "workload": opt.workload, "label": opt.label, "n": opt.n,
		"completed": len(lat), "concurrency": opt.conc, "rate": math.Round(rate*10) / 10, "rate_unit": unit,
		"p50_ms": round2(pct(lat, .5)), "p95_ms": round2(pct(lat, .95)), "p99_ms": round2(pct(lat, .99)),
		"max_ms": 0.0}
	if len(lat) > 0 {
		row["max_ms"] = round2(lat[len(lat)-1])
	}
	if opt.workload == "w1" && opt.local {
		row["variant"] = "local"
	}
	for k, v := range extra {
		row[k] = v
	}
	if opt.json {
		b, _ := json.Marshal(row)
		fmt.Println(string(b))
		return
	}
	fmt.Printf("%s %s n=%d completed=%d concurrency=%d\n", opt.workload, what, opt.n, len(lat), opt.conc)
	fmt.Printf("     %-10s %10s %9s %9s %9s %9s\n", unit, "rate", "p50 ms", "p95 ms", "p99 ms", "max ms")
	fmt.Printf("     %-10s %10.1f %9.2f %9.2f %9.2f %9.2f\n", "", rate, row["p50_ms"], row["p95_ms"], row["p99_ms"], row["max_ms"])
}

// pool runs fn(i) for i in [0, count) on opt.conc goroutines, stopping at the deadline.
func pool(count int, fn func(i int) error) {
	var next atomic.Int64
	var wg sync.WaitGroup
	var errs atomic.Int64
	for g := 0; g < opt.conc; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1) - 1)
				if i >= count || time.Now().After(opt.deadline) {
					return
				}
				if err := fn(i); err != nil && errs.Add(1) <= 5 {
					fmt.Fprintln(os.Stderr, "temporal-bench:", err)
				}
			}
		}()
	}
	wg.Wait()
}

func summarize(sends, ends []float64) ([]float64, float64) {
	var lat []float64
	first, last := math.Inf(1), 0.0
	for i := range sends {
		if sends[i] > 0 && ends[i] > 0 {
			lat = append(lat, ends[i]-sends[i])
			first = math.Min(first, sends[i])
			last = math.Max(last, ends[i])
		}
	}
	rate := 0.0
	if len(lat) > 0 && last > first {
		rate = float64(len(lat)) / ((last - first) / 1000)
	}
	return lat, rate
}

func runCtx() (context.Context, context.CancelFunc) {
	return context.WithDeadline(context.Background(), opt.deadline)
}

func runW1(c client.Client, tq, tag string) bool {
	sends, ends := make([]float64, opt.n), make([]float64, opt.n)
	pool(opt.n, func(i int) error {
		ctx, cancel := runCtx()
		defer cancel()
		sends[i] = nowMs()
		run, err := c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: fmt.Sprintf("w1-%s-%d", tag, i), TaskQueue: tq}, W1, i, opt.local)
		if err != nil {
			sends[i] = 0
			return err
		}
		var out EndResult
		if err := run.Get(ctx, &out); err != nil {
			return err
		}
		ends[i] = out.TEnd
		return nil
	})
	lat, rate := summarize(sends, ends)
	what := "3 activities, start -> last step"
	if opt.local {
		what = "3 local activities, start -> last step"
	}
	report(what, "inst/s", lat, rate, nil)
	return len(lat) == opt.n
}

// waitingOnSignal: the workflow has completed its first workflow task (it now blocks on
// the channel) and has no workflow task pending.
func waitingOnSignal(c client.Client, id string) bool {
	ctx, cancel := runCtx()
	defer cancel()
	d, err := c.DescribeWorkflowExecution(ctx, id, "")
	if err != nil {
		return false
	}
	return d.GetPendingWorkflowTask() == nil && d.GetWorkflowExecutionInfo().GetHistoryLength() >= 4
}

func runW2(c client.Client, tq, tag string) bool {
	ids := make([]string, opt.n)
	runs := make([]client.WorkflowRun, opt.n)
	pool(opt.n, func(i int) error {
		ctx, cancel := runCtx()
		defer cancel()
		ids[i] = fmt.Sprintf("w2-%s-%d", tag, i)
		r, err := c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: ids[i], TaskQueue: tq}, W2)
		runs[i] = r
		return err
	})
	ready := make([]bool, opt.n)
	for left := opt.n; left > 0 && time.Now().Before(opt.deadline); {
		var cnt atomic.Int64
		pool(opt.n, func(i int) error {
			if !ready[i] && runs[i] != nil && waitingOnSignal(c, ids[i]) {
				ready[i] = true
			}
			if !ready[i] {
				cnt.Add(1)
			}
			return nil
		})
		left = int(cnt.Load())
		if left > 0 {
			time.Sleep(100 * time.Millisecond)
		}
	}
	sends, ends := make([]float64, opt.n), make([]float64, opt.n)
	pool(opt.n, func(i int) error {
		if runs[i] == nil {
			return nil
		}
		ctx, cancel := runCtx()
		defer cancel()
		t := nowMs()
		if err := c.SignalWorkflow(ctx, ids[i], "", "go", 1); err != nil {
			return err
		}
		sends[i] = t
		return nil
	})
	pool(opt.n, func(i int) error {
		if sends[i] == 0 {
			return nil
		}
		ctx, cancel := runCtx()
		defer cancel()
		var out ResumeResult
		if err := runs[i].Get(ctx, &out); err != nil {
			return err
		}
		ends[i] = out.TResumed
		return nil
	})
	lat, rate := summarize(sends, ends)
	report("signal -> workflow resumed", "resumes/s", lat, rate, nil)
	return len(lat) == opt.n
}

// timerFiredMs reads the TimerFired event's time from the workflow's history.
func timerFiredMs(c client.Client, id string) (float64, error) {
	ctx, cancel := runCtx()
	defer cancel()
	it := c.GetWorkflowHistory(ctx, id, "", false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	for it.HasNext() {
		ev, err := it.Next()
		if err != nil {
			return 0, err
		}
		if ev.GetEventType() == enumspb.EVENT_TYPE_TIMER_FIRED {
			return float64(ev.GetEventTime().AsTime().UnixNano()) / 1e6, nil
		}
	}
	return 0, errors.New(id + ": no TimerFired event")
}

// startTimer starts one W3 workflow and waits until the worker has set its timer (a start
// returns before the workflow's first task has run: clients that only started workflows
// ran far ahead of the worker, and most timers were set after they were due).
func startTimer(c client.Client, tq, id string, due float64) (client.WorkflowRun, error) {
	ctx, cancel := runCtx()
	defer cancel()
	ch := make(chan struct{})
	timerSet.Store(id, ch)
	run, err := c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: id, TaskQueue: tq}, W3, due)
	if err != nil {
		timerSet.Delete(id)
		return nil, err
	}
	select {
	case <-ch:
	case <-ctx.Done():
		timerSet.Delete(id)
		return run, ctx.Err()
	}
	return run, nil
}

// autoLead: the lead that leaves time to set every timer before it is due: 2 s + 1.5 x N /
// the rate at which a probe of untimed timer workflows (due at once) was started and had
// its timers set, the way the timed ones are.
func autoLead(c client.Client, tq, tag string) (int, float64) {
	probe := min(100, max(10, opt.n/20))
	t0 := nowMs()
	pool(probe, func(i int) error {
		_, err := startTimer(c, tq, fmt.Sprintf("w3probe-%s-%d", tag, i), nowMs())
		return err
	})
	rate := float64(probe) / math.Max((nowMs()-t0)/1000, 0.001)
	return 2000 + int(1.5*float64(opt.n)/rate*1000), rate
}

func runW3(c client.Client, tq, tag string) bool {
	probeRate := 0.0
	if opt.leadMs <= 0 {
		opt.leadMs, probeRate = autoLead(c, tq, tag)
	}
	base := nowMs() + float64(opt.leadMs)
	due := make([]float64, opt.n)
	ids := make([]string, opt.n)
	runs := make([]client.WorkflowRun, opt.n)
	var late atomic.Int64
	pool(opt.n, func(i int) error {
		ids[i] = fmt.Sprintf("w3-%s-%d", tag, i)
		due[i] = base + float64(i)*float64(opt.windowMs)/float64(opt.n)
		r, err := startTimer(c, tq, ids[i], due[i])
		if nowMs() > due[i] {
			late.Add(1)
		}
		runs[i] = r
		return err
	})
	if late.Load() > 0 {
		fmt.Fprintf(os.Stderr, "temporal-bench: %d of %d timers were started after they were due (raise --lead-ms)\n", late.Load(), opt.n)
	}
	resumed := make([]float64, opt.n)
	var setLate atomic.Int64
	pool(opt.n, func(i int) error {
		if runs[i] == nil {
			return nil
		}
		ctx, cancel := runCtx()
		defer cancel()
		var out TimerResult
		if err := runs[i].Get(ctx, &out); err != nil {
			return err
		}
		resumed[i] = out.NowMs
		if out.SetMs > due[i] {
			setLate.Add(1)
		}
		return nil
	})
	if setLate.Load() > 0 {
		fmt.Fprintf(os.Stderr, "temporal-bench: %d of %d timers were set (the workflow's first task ran) after they were due\n", setLate.Load(), opt.n)
	}
	fired := make([]float64, opt.n)
	pool(opt.n, func(i int) error {
		if resumed[i] == 0 {
			return nil
		}
		t, err := timerFiredMs(c, ids[i])
		fired[i] = t
		return err
	})
	lat, _ := summarize(due, fired)
	res, _ := summarize(due, resumed)
	sort.Float64s(res)
	report("timer lateness (TimerFired - due)", "timers/s", lat, float64(opt.n)*1000/float64(opt.windowMs),
		map[string]any{"window_ms": opt.windowMs, "lead_ms": opt.leadMs, "started_late": late.Load(),
			"probe_starts_per_s": math.Round(probeRate*10) / 10, "timer_set_late": setLate.Load(),
			"resumed_p50_ms": round2(pct(res, .5)), "resumed_p99_ms": round2(pct(res, .99)),
			"fired_by": "TimerFired event time"})
	return len(lat) == opt.n
}

func setup(logger sdklog.Logger) bool {
	nc, err := client.NewNamespaceClient(client.Options{HostPort: opt.address, Logger: logger})
	for err != nil && time.Now().Before(opt.deadline) {
		time.Sleep(500 * time.Millisecond)
		nc, err = client.NewNamespaceClient(client.Options{HostPort: opt.address, Logger: logger})
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "temporal-bench: frontend:", err)
		return false
	}
	defer nc.Close()
	for time.Now().Before(opt.deadline) {
		ctx, cancel := runCtx()
		err = nc.Register(ctx, &workflowservice.RegisterNamespaceRequest{Namespace: opt.namespace,
			WorkflowExecutionRetentionPeriod: durationpb.New(24 * time.Hour)})
		cancel()
		var exists *serviceerror.NamespaceAlreadyExists
		if err == nil || errors.As(err, &exists) {
			break
		}
		time.Sleep(time.Second)
	}
	if err != nil && !errors.As(err, new(*serviceerror.NamespaceAlreadyExists)) {
		fmt.Fprintln(os.Stderr, "temporal-bench: register namespace:", err)
		return false
	}
	// the frontend's namespace cache refreshes every few seconds: run one W1 until it works
	c, err := client.Dial(client.Options{HostPort: opt.address, Namespace: opt.namespace, Logger: logger})
	if err != nil {
		fmt.Fprintln(os.Stderr, "temporal-bench:", err)
		return false
	}
	defer c.Close()
	tq := fmt.Sprintf("bench-setup-%08x", rand.Uint32())
	w := newWorker(c, tq)
	if err := w.Start(); err != nil {
		fmt.Fprintln(os.Stderr, "temporal-bench: worker:", err)
		return false
	}
	defer w.Stop()
	for time.Now().Before(opt.deadline) {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		run, err := c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{TaskQueue: tq}, W1, 0, false)
		if err == nil {
			var out EndResult
			err = run.Get(ctx, &out)
		}
		cancel()
		if err == nil {
			fmt.Println("temporal-bench: namespace", opt.namespace, "ready")
			return true
		}
		time.Sleep(time.Second)
	}
	fmt.Fprintln(os.Stderr, "temporal-bench: namespace", opt.namespace, "not usable before the timeout")
	return false
}

// newWorker registers the workflows and activities on a worker with default options
// (--pollers sets the number of workflow and of activity task pollers; 0: the SDK's default).
func newWorker(c client.Client, tq string) worker.Worker {
	w := worker.New(c, tq, worker.Options{MaxConcurrentWorkflowTaskPollers: opt.pollers,
		MaxConcurrentActivityTaskPollers: opt.pollers})
	w.RegisterWorkflow(W1)
	w.RegisterWorkflow(W2)
	w.RegisterWorkflow(W3)
	w.RegisterActivity(StepA)
	w.RegisterActivity(StepB)
	w.RegisterActivity(StepC)
	return w
}

func main() {
	flag.StringVar(&opt.workload, "workload", "", "w1|w2|w3|setup")
	flag.IntVar(&opt.n, "n", 1000, "instances (timers)")
	flag.IntVar(&opt.conc, "concurrency", 16, "client goroutines")
	flag.IntVar(&opt.timeoutS, "timeout", 300, "bound of the run in seconds")
	flag.IntVar(&opt.windowMs, "window-ms", 20000, "w3: timers due evenly over this window")
	flag.IntVar(&opt.leadMs, "lead-ms", 0, "w3: the first timer is due this long after the start (0: from a probe of the start rate)")
	flag.StringVar(&opt.label, "label", "", "label of the result row")
	flag.IntVar(&opt.pollers, "pollers", 0, "workflow and activity task pollers of the worker (0: the SDK's default, 2 each)")
	flag.BoolVar(&opt.local, "local", false, "w1: local activities")
	flag.BoolVar(&opt.json, "json", false, "one JSON object per result")
	flag.Parse()
	opt.address = os.Getenv("TEMPORAL_ADDRESS")
	if opt.address == "" {
		opt.address = "127.0.0.1:7233"
	}
	opt.namespace = os.Getenv("TEMPORAL_NAMESPACE")
	if opt.namespace == "" {
		opt.namespace = "default"
	}
	opt.deadline = time.Now().Add(time.Duration(opt.timeoutS) * time.Second)
	logger := sdklog.NewStructuredLogger(slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})))
	if opt.workload == "setup" {
		if !setup(logger) {
			os.Exit(1)
		}
		return
	}
	if opt.workload != "w1" && opt.workload != "w2" && opt.workload != "w3" {
		fmt.Fprintln(os.Stderr, "usage: temporal-bench --workload w1|w2|w3|setup [--n N] [--concurrency C] [--timeout S] [--window-ms MS] [--lead-ms MS] [--label TEXT] [--local] [--pollers P] [--json]")
		os.Exit(2)
	}
	c, err := client.Dial(client.Options{HostPort: opt.address, Namespace: opt.namespace, Logger: logger})
	if err != nil {
		fmt.Fprintln(os.Stderr, "temporal-bench:", err)
		os.Exit(1)
	}
	defer c.Close()
	tag := fmt.Sprintf("%08x", rand.Uint32())
	tq := "bench-" + tag
	w := newWorker(c, tq)
	if err := w.Start(); err != nil {
		fmt.Fprintln(os.Stderr, "temporal-bench: worker:", err)
		os.Exit(1)
	}
	var ok bool
	switch opt.workload {
	case "w1":
		ok = runW1(c, tq, tag)
	case "w2":
		ok = runW2(c, tq, tag)
	case "w3":
		ok = runW3(c, tq, tag)
	}
	w.Stop()
	if !ok {
		os.Exit(1)
	}
}
