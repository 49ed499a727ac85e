# counter_ext: PGXS build of a C++17 PostgreSQL extension (15, 16, 17, 18).
#
#   make                 build counter_ext.so and the extension script
#   make install         install into the PostgreSQL that pg_config names
#   make test            everything: set-up, build, a throwaway cluster, all tests
#   make test PG=17      the same on PostgreSQL 17 (or 18, 15, all) in a cached
#                        chroot of the Debian suite that ships it (root only)
#   make deb             Debian packages postgresql-N-counter-ext into build/deb
#                        (PG=17, 18, 15 or all as above; default: this machine's)
#   make deb-test        the built package in a clean chroot: CREATE EXTENSION,
#                        each feature once, the worker preloaded (PG= as above)
#   make demo            a throwaway cluster showing the extension on a click stream
#   make format-check    clang-format, as CI checks it
#   make format          rewrite the sources in the house style

PG_CONFIG ?= pg_config

EXTENSION = counter_ext
EXTVERSION := $(shell sed -n "s/^default_version *= *'\(.*\)'/\1/p" counter_ext.control)
MODULE_big = counter_ext

SRCS := $(sort $(wildcard src/*.cpp))
OBJS = $(SRCS:.cpp=.o)

# The install script of the current version is assembled from the pieces in
# src/sql/ (one per feature, applied in name order). Each released version
# (src/sql/upgrade/releases) gets one update script to the current version,
# counter_ext--X--$(EXTVERSION).sql, assembled by src/sql/upgrade/assemble.sh
# from the pieces of every hop since X (src/sql/upgrade/A--B/) and the
# current code once (src/sql/upgrade/README.md). No install script of a
# released version is in the tree: test/released_scripts.sh builds them from
# git history for the upgrade test.
SQL_PIECES := $(sort $(wildcard src/sql/*.sql))
RELEASED := $(shell sed -n 's/^\([0-9][0-9.]*\) .*/\1/p' src/sql/upgrade/releases)
UPGRADES_built := $(foreach v,$(RELEASED),$(EXTENSION)--$(v)--$(EXTVERSION).sql)
UPGRADE_PIECES := src/sql/upgrade/releases src/sql/upgrade/assemble.sh src/sql/upgrade/code.sql \
	$(wildcard src/sql/upgrade/*--*/*.sql)
DATA_built = $(EXTENSION)--$(EXTVERSION).sql $(UPGRADES_built)

# pg_regress files: sql/NAME.sql with expected/NAME.out
REGRESS := $(basename $(notdir $(wildcard sql/*.sql)))
REGRESS_OPTS = --load-extension=pgtap

PG_CPPFLAGS = -isystem $(shell $(PG_CONFIG) --includedir-server) -Isrc/include \
	-DCOUNTER_EXT_VERSION='"$(EXTVERSION)"'
PG_CXXFLAGS = -std=c++17 -Wall -Wextra -Werror -Wno-missing-field-initializers
SHLIB_LINK = -lstdc++

# The server was built with LLVM JIT support; bitcode for C++ sources would
# need clang++ to see our flags, and JIT inlining of our code buys nothing.
override with_llvm = no

# Header dependencies (.deps/*.Po), so a changed header rebuilds its users.
override autodepend = yes

# The majors this tree builds against (src/include/counter_ext/compat.hpp
# holds what differs between them; doc/support.md says how to add one).
CE_SUPPORTED_MAJORS = 15 16 17 18
CE_PG_MAJOR := $(shell $(PG_CONFIG) --version 2>/dev/null | sed -n 's/^PostgreSQL \([0-9][0-9]*\).*/\1/p')
ifeq ($(filter $(CE_PG_MAJOR),$(CE_SUPPORTED_MAJORS)),)
$(error counter_ext builds against PostgreSQL $(CE_SUPPORTED_MAJORS); $(PG_CONFIG) --version says '$(shell $(PG_CONFIG) --version 2>&1 | head -n 1)'. Set PG_CONFIG=/usr/lib/postgresql/N/bin/pg_config for a supported N)
endif

PGXS := $(shell $(PG_CONFIG) --pgxs)
include $(PGXS)

# The version is compiled in (COUNTER_EXT_VERSION): a new one rebuilds.
$(OBJS): counter_ext.control


$(EXTENSION)--$(EXTVERSION).sql: $(SQL_PIECES) Makefile counter_ext.control
	@{ printf '%s\n' "-- counter_ext $(EXTVERSION): generated from src/sql/*.sql by make; edit those."; \
	   printf '%s\n' '\echo Use "CREATE EXTENSION counter_ext" to load this file. \quit'; \
	   for f in $(SQL_PIECES); do printf '\n-- ---- %s\n' "$$f"; cat "$$f"; done; } > $@


$(EXTENSION)--%--$(EXTVERSION).sql: $(UPGRADE_PIECES) $(SQL_PIECES) Makefile counter_ext.control
	@bash src/sql/upgrade/assemble.sh $* $(EXTVERSION) > $@.tmp && mv $@.tmp $@


CLANG_FORMAT ?= clang-format
FORMAT_FILES = $(wildcard src/*.cpp src/include/counter_ext/*.hpp test/unit/*.cpp)

# PG= picks the PostgreSQL majors the suite (and make deb) runs on: empty is
# the machine's own (test/run.sh); 15, 17, 18 or all go through test/versions.sh.
PG ?=
.PHONY: test demo format format-check deb deb-test
test:
ifeq ($(PG),)
	bash test/run.sh
else
	bash test/versions.sh $(PG)
endif

demo:
	bash test/demo/run.sh

deb:
	bash test/deb/build.sh $(if $(PG),$(PG),host)

deb-test:
	bash test/deb/test.sh $(if $(PG),$(PG),15)

format-check:
	$(CLANG_FORMAT) --dry-run --Werror $(FORMAT_FILES)
	@if grep -rnE '(echo|printf)[^|]*[|][[:space:]]*grep[[:space:]]+-[A-Za-z]*q' test/ .ci/; then \
		echo "the lines above pipe into grep -q: under pipefail the writer can die of SIGPIPE when grep stops" \
		     "early, and the test fails at random; write grep -q PATTERN <<<\"\$$var\""; exit 1; fi

format:
	$(CLANG_FORMAT) -i $(FORMAT_FILES)

EXTRA_CLEAN = .deps
