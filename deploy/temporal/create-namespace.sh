#!/bin/sh
# Registers longrun's namespace with its retention (how long Temporal keeps a closed run's
# history), or updates the retention of an existing one. longrun's workers register the
# search attributes they use themselves.
set -eu
: "${TEMPORAL_ADDRESS:?}" "${NAMESPACE:?}" "${RETENTION:?}"

until temporal operator cluster health --address "$TEMPORAL_ADDRESS" >/dev/null 2>&1; do
  echo "waiting for Temporal at $TEMPORAL_ADDRESS"
  sleep 2
done
if temporal operator namespace describe -n "$NAMESPACE" --address "$TEMPORAL_ADDRESS" >/dev/null 2>&1; then
  temporal operator namespace update -n "$NAMESPACE" --retention "$RETENTION" --address "$TEMPORAL_ADDRESS"
  echo "namespace $NAMESPACE: retention $RETENTION"
else
  temporal operator namespace create -n "$NAMESPACE" --retention "$RETENTION" --address "$TEMPORAL_ADDRESS"
  echo "namespace $NAMESPACE created, retention $RETENTION"
fi
