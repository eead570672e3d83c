# Two entry points for a fresh machine (see README.md):
#   make demo   install, then run the main job: ngptune sweep (studies/demo.toml on the built-in
#               demo scene; 2 gloo ranks on a CPU, every GPU otherwise)
#   make test   install with the test suite's tools, then run the test suite
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.ngptune-installed
TEST_STAMP := $(VENV)/.ngptune-test-installed

.PHONY: demo test setup clean

# ngptune with the extras of every command (colmap, view, tensorboard, dashboard)
setup: $(STAMP)

$(STAMP): pyproject.toml scripts/setup_env.sh
	bash scripts/setup_env.sh $(VENV)
	touch $(STAMP)

# the same and the test suite's tools (pytest, hypothesis, Triton for the kernels' CPU
# interpreter, ...) in one pip run; it satisfies setup too
$(TEST_STAMP): pyproject.toml scripts/setup_env.sh
	bash scripts/setup_env.sh $(VENV) test,colmap,view,tensorboard,dashboard
	touch $(STAMP) $(TEST_STAMP)

demo: $(STAMP)
	$(VENV)/bin/ngptune sweep

test: $(TEST_STAMP)
	$(PY) -m pytest -q -ra tests

clean:
	rm -rf $(VENV) build *.egg-info
