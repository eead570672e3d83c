# Two entry points for a fresh machine (see README.md):
#   make demo   install, then run the main job: ngptune sweep (studies/demo.toml on the built-in
#               demo scene; 2 gloo ranks on a CPU, every GPU otherwise)
#   make test   install, then run the test suite
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.ngptune-installed

.PHONY: demo test setup clean

setup: $(STAMP)

$(STAMP): pyproject.toml scripts/setup_env.sh
	bash scripts/setup_env.sh $(VENV)
	touch $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/ngptune sweep

test: $(STAMP)
	$(PY) -m pytest -q -ra tests

clean:
	rm -rf $(VENV) build *.egg-info
