// Package envconfig loads configuration and pipeline spec files: a YAML
// file read strictly, then environment overrides by one naming rule used
// by every tflo process, then the config's defaults and validation.
//
// # Reading the file
//
// [Load] (and [Decode] for bytes) refuses an unknown key, a repeated key
// and a value of the wrong type, each as a [Problem] naming the key path
// (kafka.topic, graph.nodes[2].params) and the line, and reports every
// problem of the file at once ([Errors]). ${NAME} and ${NAME:-default}
// are replaced by environment variables before parsing ([Expand]); a
// bare $NAME is left alone. A type implementing [Positioned] learns the
// line it was declared on. Defaults that depend on other keys come last:
// a config implementing [Defaulter] gets ApplyDefaults after the file and
// the environment, then [Validator]'s Validate.
//
// # The naming rule
//
// A field's variable is the prefix, then the field's YAML key path, joined
// by underscores and upper-cased, with every character other than a
// letter or digit turned into an underscore:
//
//	kafka.brokers          → TFLO_KAFKA_BROKERS
//	checkpoint.interval    → TFLO_CHECKPOINT_INTERVAL
//	temporal.tls.ca_file   → TFLO_TEMPORAL_TLS_CA_FILE
//
// Values are parsed by the field's type: strings as they are; bools,
// integers and floats with strconv; time.Duration and any
// encoding.TextUnmarshaler from text ("10s"); []string as a
// comma-separated list. Lists of sections and maps have no variable (set
// them in the file). Fields tagged yaml:"-" (secrets) have no variable:
// configs name the variable holding a secret instead (token_env). An
// environment variable that is set, even empty, overrides the file.
//
// [Keys] lists every variable a config type accepts, so a deployment file
// (docker-compose.yml) can be checked against it.
//
// Concurrency: the functions hold no state; they are safe to call
// concurrently on different destinations.
package envconfig
