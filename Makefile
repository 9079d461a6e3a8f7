# Shortcuts; each sets everything up first (scripts/setup.sh is idempotent).
.PHONY: setup run test bench clean
setup:
	bash scripts/setup.sh
run:
	bash scripts/setup.sh run
test:
	bash scripts/setup.sh test
bench:
	bash scripts/setup.sh bench
clean:
	bash scripts/setup.sh && .venv/bin/mrc-testbed clean
