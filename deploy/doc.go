// Package deploy holds the deployment files of the iot-portal (the
// workers' configs, the Mosquitto config) and the test that checks
// docker-compose.yml at the repository root against the workers' config
// keys and the pipeline specs they run (workers/pipelines). It has no code
// of its own.
package deploy
