//go:build !serving

package main

// labCommands are the commands that run simulated engines, Envoys and
// fleets: the demo, the routing benchmark, one engine, one Envoy model.
// The serving binary (built with -tags serving: `make build`) has none
// of them, and links neither envoysim nor the engine model nor gonum/plot.
func labCommands() []command {
	return []command{
		{"demo", "[--config FILE] [--duration D]", "run the whole stack here (engines, ILB, envoysim) under a short load and report", runDemo},
		{"sim", "[--scenario S|all] [--trace F] [--seed N] [--json] [--plots DIR] [--report F]", "compare routing policies on a simulated fleet in virtual time", runSim},
		{"engine", "--cluster C --models M[,M...] [--listen ADDR] [--kind K]", "serve one simulated inference engine (OpenAI API; vLLM, SGLang, TGI or trtllm-serve metrics), no GPU needed", runEngine},
		{"engines", "--config FILE [--profile P]", "serve a simulated engine on every endpoint of a configuration (each cluster's kind and models)", runEngines},
		{"ha-demo", "[--replicas 3] [--etcd-members 3] [--lease-ttl 2s]", "run ILB as replicas on a local etcd (Debian's etcd-server), stop the leader under load and report", runHADemo},
		{"bench-xds", "[--streams 100,1000,10000] [--modes sotw,delta] [--waves N]", "measure ILB's xDS server (its own process) against N simulated Envoys: time to full config, to ACK a new version, CPU and memory per Envoy", runBenchXDS},
		{"bench-replicas", "[--scenario S|all] [--loads 0.5,0.7,...] [--seeds 1,2,3] [--report F] [--max-loras N] [--max-cpu-loras N] [--zipf S] [--requests DIR]", "compare replica picking (least request, round robin, session hash, a GIE-style prefix scorer, ILB) on multi-turn, agent, RAG and no-reuse workloads in virtual time", runBenchReplicas},
		{"envoysim", "--bootstrap FILE", "run one Envoy model (envoysim) from an ilb envoy-config bootstrap, when no Envoy is at hand", runEnvoySim},
	}
}
