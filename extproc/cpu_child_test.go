//go:build unix

package extproc_test

import (
	"bufio"
	"context"
	"fmt"
	"maps"
	"net"
	"os"
	"runtime"
	"runtime/pprof"
	"slices"
	"strings"
	"testing"
	"time"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace/noop"
	"google.golang.org/grpc"

	"github.com/ilbproject/ilb/config"
	"github.com/ilbproject/ilb/demand"
	"github.com/ilbproject/ilb/extproc"
	"github.com/ilbproject/ilb/internal/serve"
	"github.com/ilbproject/ilb/live"
	"github.com/ilbproject/ilb/weights"
)

// childEnv makes this test binary a server of BenchmarkServerCPU
// instead of running tests: "ilb" or "floor".
const (
	childEnv   = "ILB_BENCH_EXTPROC_SERVER"
	childILB   = "ilb"
	childFloor = "floor"
	// childPicker is ILB serving an InferencePool's picker source on its
	// picker listener; childDuplexFloor the full-duplex floor
	// (BenchmarkPickerCPU).
	childPicker      = "picker"
	childDuplexFloor = "duplex-floor"
	// pickerSource is the picker source childPicker serves.
	pickerSource = "gateway-us"
)

func TestMain(m *testing.M) {
	if kind := os.Getenv(childEnv); kind != "" {
		if cpu := os.Getenv(childEnv + "_CPU"); cpu != "" {
			if err := pinProcess(cpu); err != nil {
				fmt.Fprintln(os.Stderr, "bench server:", err)
				os.Exit(1)
			}
		}
		if err := profiled(kind, func() error { return serveChild(kind) }); err != nil {
			fmt.Fprintln(os.Stderr, "bench server:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// profiled runs f, writing a CPU profile of it to
// $ILB_BENCH_EXTPROC_SERVER_CPUPROFILE and an allocation profile after it
// to $ILB_BENCH_EXTPROC_SERVER_MEMPROFILE when the server of kind is
// profiled: ILB_BENCH_EXTPROC_SERVER_PROFILE=ilb, floor, or all (each
// file name then ends in .ilb or .floor).
func profiled(kind string, f func() error) error {
	suffix := ""
	switch os.Getenv(childEnv + "_PROFILE") {
	case kind:
	case "all":
		suffix = "." + kind
	default:
		return f()
	}
	if path := os.Getenv(childEnv + "_CPUPROFILE"); path != "" {
		path += suffix
		out, err := os.Create(path)
		if err != nil {
			return err
		}
		defer out.Close()
		if err := pprof.StartCPUProfile(out); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	if path := os.Getenv(childEnv + "_MEMPROFILE"); path != "" {
		path += suffix
		runtime.MemProfileRate = 64 << 10
		defer func() {
			if out, err := os.Create(path); err == nil {
				_ = pprof.Lookup("allocs").WriteTo(out, 0)
				_ = out.Close()
			}
		}()
	}
	return f()
}

// serveChild serves an ext_proc server of kind on a loopback port, as
// ILB serves it (the demo configuration and weights, metrics on a
// registry, demand metered, live engine state with every cluster's
// replicas, no tracing), or the CONTINUE-only floor on a bare gRPC server. It prints the address,
// then answers each "cpu" line on stdin with its CPU time so far in
// nanoseconds (each "heap" line with the bytes and objects it allocated
// on the heap so far, BenchmarkServerAllocs), and stops when stdin closes.
func serveChild(kind string) error {
	c, err := config.Load("../examples/demo/ilb.yaml")
	if err != nil {
		return err
	}
	if kind == childPicker || kind == childDuplexFloor {
		c.Sources = append(c.Sources, config.Source{
			Name: pickerSource, Region: "us-east", AllowedRegions: []string{"us-east"}, FailMode: config.FailClosed,
			DefaultModel: "llama-3.1-8b-instruct", DefaultPriority: "standard",
			Routing: config.RoutingPicker, Picker: &config.SourcePicker{Listen: "127.0.0.1:0", Cluster: "us-east-vllm"},
		})
		if err := c.Validate(); err != nil {
			return err
		}
	}
	srv, err := extproc.New(extproc.Options{
		Config: c, Registry: prometheus.NewRegistry(), Meter: demand.NewMeter(time.Now()),
		TracerProvider: noop.NewTracerProvider(), // what ilb serve passes when tracing is off
	})
	if err != nil {
		return err
	}
	w, err := weights.Proportional{}.Compute(weights.Input{Config: c, Clusters: weights.StaticState(c)})
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := srv.Publish(ctx, w); err != nil {
		return err
	}
	ls := &live.State{Clusters: map[string]live.Cluster{}}
	for i, cl := range c.Clusters {
		cs := live.Cluster{
			Pressure: 0.1 * float64(i), PressureKnown: true, TTFT: 0.05 + 0.01*float64(i), TTFTKnown: true, FirstTokensPerSecond: 20,
		}
		// Every cluster's replicas, as the signals monitor reports them:
		// replica picking is live where a cluster has it on.
		{
			for _, ep := range cl.Endpoints {
				cs.Replicas = append(cs.Replicas, live.Replica{Address: ep, Ramp: 1, Running: 2, ScrapedAt: time.Now()})
			}
		}
		ls.Clusters[cl.Name] = cs
	}
	// ILB's server as app.go builds it (the picker listener's with its
	// source interceptor); the floors bare: grpc-go's defaults, the cost
	// of any ext_proc server.
	var opts []grpc.ServerOption
	switch kind {
	case childILB:
		opts = srv.GRPCOptions()
	case childPicker:
		opts = append(srv.GRPCOptions(), grpc.ChainStreamInterceptor(extproc.AsSource(pickerSource)))
	}
	g := grpc.NewServer(opts...)
	switch kind {
	case childILB, childPicker:
		srv.Register(g)
		go func() { // the signals monitor's cadence
			t := time.NewTicker(time.Second)
			defer t.Stop()
			for {
				l := *ls
				l.At = time.Now()
				l.Clusters = maps.Clone(ls.Clusters)
				for name, cs := range l.Clusters {
					if len(cs.Replicas) > 0 {
						reps := slices.Clone(cs.Replicas)
						for i := range reps {
							reps[i].ScrapedAt = l.At
						}
						cs.Replicas = reps
						l.Clusters[name] = cs
					}
				}
				srv.SetLive(&l)
				select {
				case <-ctx.Done():
					return
				case <-t.C:
				}
			}
		}()
	case childFloor:
		extprocv3.RegisterExternalProcessorServer(g, floorServer{})
	case childDuplexFloor:
		extprocv3.RegisterExternalProcessorServer(g, floorServer{echo: true})
	default:
		return fmt.Errorf("unknown server kind %q", kind)
	}
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	done := make(chan error, 1)
	go func() { done <- serve.GRPC(ctx, g, ln) }()
	fmt.Println(ln.Addr())
	in := bufio.NewScanner(os.Stdin)
	for in.Scan() {
		switch strings.TrimSpace(in.Text()) {
		case "cpu":
			cpu, err := rusage()
			if err != nil {
				return err
			}
			fmt.Println(cpu.Nanoseconds())
		case "heap":
			bytes, objects := heapAllocs()
			fmt.Println(bytes, objects)
		default:
			return fmt.Errorf("unknown command %q", in.Text())
		}
	}
	cancel()
	return <-done
}

// floorServer answers every ext_proc message with an empty response of
// its type: CONTINUE, nothing changed. Its cost is grpc-go's. With echo
// (the full-duplex floor) each body chunk is answered with itself as a
// StreamedBodyResponse instead: the least an endpoint picker sends.
type floorServer struct {
	extprocv3.UnimplementedExternalProcessorServer
	echo bool
}

var _ extprocv3.ExternalProcessorServer = floorServer{}

func (f floorServer) Process(stream extprocv3.ExternalProcessor_ProcessServer) error {
	body := func(b *extprocv3.HttpBody) *extprocv3.BodyResponse {
		if !f.echo {
			return &extprocv3.BodyResponse{}
		}
		return &extprocv3.BodyResponse{Response: &extprocv3.CommonResponse{BodyMutation: &extprocv3.BodyMutation{
			Mutation: &extprocv3.BodyMutation_StreamedResponse{StreamedResponse: &extprocv3.StreamedBodyResponse{Body: b.GetBody(), EndOfStream: b.GetEndOfStream()}},
		}}}
	}
	for {
		req, err := stream.Recv()
		if err != nil {
			return nil //nolint:nilerr // the stream ended: io.EOF or cancelled
		}
		resp := &extprocv3.ProcessingResponse{}
		switch r := req.GetRequest().(type) {
		case *extprocv3.ProcessingRequest_RequestHeaders:
			resp.Response = &extprocv3.ProcessingResponse_RequestHeaders{RequestHeaders: &extprocv3.HeadersResponse{}}
		case *extprocv3.ProcessingRequest_RequestBody:
			resp.Response = &extprocv3.ProcessingResponse_RequestBody{RequestBody: body(r.RequestBody)}
		case *extprocv3.ProcessingRequest_ResponseHeaders:
			resp.Response = &extprocv3.ProcessingResponse_ResponseHeaders{ResponseHeaders: &extprocv3.HeadersResponse{}}
		case *extprocv3.ProcessingRequest_ResponseBody:
			resp.Response = &extprocv3.ProcessingResponse_ResponseBody{ResponseBody: body(r.ResponseBody)}
		case *extprocv3.ProcessingRequest_RequestTrailers:
			resp.Response = &extprocv3.ProcessingResponse_RequestTrailers{RequestTrailers: &extprocv3.TrailersResponse{}}
		case *extprocv3.ProcessingRequest_ResponseTrailers:
			resp.Response = &extprocv3.ProcessingResponse_ResponseTrailers{ResponseTrailers: &extprocv3.TrailersResponse{}}
		}
		if err := stream.Send(resp); err != nil {
			return err
		}
	}
}
