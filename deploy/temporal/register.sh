#!/bin/sh
# Creates the Temporal namespace tflo runs in and registers tflo's search
# attributes in it (the list is workflows.SearchAttributeFlags; the test in
# deploy/compose_test.go keeps the two equal). docker-compose.yml runs it in
# the temporal-setup service once the server is healthy; the workers start
# only after it exits 0.
#
# Each step is retried (the frontend accepts connections before the
# namespace is usable) and the script exits non-zero, naming the step, when
# a step still fails after $ATTEMPTS tries. Registering attributes that
# already exist with the same type succeeds, so re-running is safe; an
# attribute that exists with another type fails loudly.
set -eu

ns=${TEMPORAL_NAMESPACE:-default}
attempts=${ATTEMPTS:-30}
pause=${PAUSE_SECONDS:-2}

# retry <step> <command...>
retry() {
	step=$1
	shift
	i=1
	until "$@"; do
		if [ "$i" -ge "$attempts" ]; then
			echo "temporal-setup: $step failed $attempts times; giving up" >&2
			exit 1
		fi
		echo "temporal-setup: $step not done yet (attempt $i of $attempts); retrying in ${pause}s"
		i=$((i + 1))
		sleep "$pause"
	done
}

namespace() {
	temporal operator namespace describe --namespace "$ns" >/dev/null 2>&1 ||
		temporal operator namespace create --namespace "$ns"
}

attributes() {
	temporal operator search-attribute create --namespace "$ns" \
		--name TfloPipeline --type Keyword \
		--name TfloBreakerState --type Keyword
}

# registered: every attribute is listed in the namespace.
registered() {
	list=$(temporal operator search-attribute list --namespace "$ns") || return 1
	for a in TfloPipeline TfloBreakerState; do
		echo "$list" | grep -qw "$a" || return 1
	done
}

retry "cluster health" temporal operator cluster health
retry "namespace $ns" namespace
retry "search attributes in $ns" attributes
retry "listing the search attributes of $ns" registered
echo "temporal-setup: namespace $ns has tflo's search attributes"
