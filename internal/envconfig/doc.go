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
// bare $NAME is left alone, and a ${NAME} whose variable is unset is one
// more problem of the file, reported with the others. A type implementing [Positioned] learns the
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
// configs name the variable holding a secret instead (token_env).
//
// A variable set to the empty string clears its key: the field gets its
// zero value, as if the file had not set it, and the config's default
// applies (ApplyDefaults runs after). To keep the file's value, unset the
// variable. (An empty duration or number is therefore not a parse error.)
//
// Every problem is reported at once: [Load] returns one [*Errors] with the
// file's problems (key path and line) and the environment's (variable and
// key path). [Unknown] refuses variables under the prefix that name no
// key, suggesting the closest key.
//
// [Keys] lists every variable a config type accepts, so a deployment file
// (docker-compose.yml) can be checked against it, and the Go field each
// sets (Key.Field: where `--help` finds its description).
//
// # Where values came from
//
// [LoadOrigins] is Load that also says where each value came from
// ([Origins]: "FILE:LINE", "env NAME", or "default"); [Settings] flattens
// a config into its values with secrets redacted ([Redact]: keys named
// like password, secret, token or api_key, and URL passwords); [Print]
// writes both, as `worker --print-config` does.
//
// Concurrency: the functions hold no state; they are safe to call
// concurrently on different destinations.
package envconfig
