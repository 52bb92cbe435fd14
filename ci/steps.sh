# Sourced by the set-up scripts (setup_cpu.sh, setup_vllm.sh): each step's line, then its time once the next one
# starts (or at done_step). Set STEP_TAG (e.g. setup) before sourcing.
T0=$SECONDS
step_t=$SECONDS
step_name=""
done_step() {
  if [ -n "$step_name" ]; then printf '\033[1m[%s]\033[0m   %s: %ds\n' "$STEP_TAG" "$step_name" "$((SECONDS - step_t))"; fi
  step_name=""
}
step() { done_step; printf '\033[1m[%s]\033[0m %s\n' "$STEP_TAG" "$2"; step_name=$1; step_t=$SECONDS; }
