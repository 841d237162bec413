// Package deploy holds the deployment files of the iot-portal (worker
// configs, the Mosquitto config) and the test that checks
// docker-compose.yml at the repository root against the workers' config
// keys. It has no code of its own.
package deploy
