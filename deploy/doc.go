// Package deploy holds the deployment files of the iot-portal and the test
// that checks them. It has no code of its own.
//
//   - central.yaml, edge.yaml, simulator.yaml: the workers' configs,
//     mounted by docker-compose.yml and baked into the image (the edge and
//     central workers are workers/cmd/worker running iot-portal's pipeline
//     specs, workers/pipelines, baked in under /etc/tflo/pipelines);
//   - mosquitto.conf: the development MQTT broker;
//   - temporal/: the Temporal setup docker-compose.yml runs with
//     temporalio/admin-tools (setup-postgres.sh: databases and schemas;
//     register.sh: the namespace and tflo's search attributes) and the
//     server's development dynamic config;
//   - grafana/tflo.json: a Grafana dashboard of the workers' metrics
//     (internal/worker's TestOperatorEndpointsAndMetrics checks that every
//     metric its queries read is served).
//
// compose_test.go loads docker-compose.yml (with the repository's .env)
// through compose-go, the loader `docker compose` itself uses, and checks
// the images against tags known to be published, health checks and start
// order, published ports, volumes, stop grace periods, the search
// attributes against workflows.SearchAttributeFlags, and every worker's
// config keys (the simulator's under TFLO_SIMULATOR_), the pipeline spec
// it runs and the services they reach.
package deploy
