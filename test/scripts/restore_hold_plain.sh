#!/usr/bin/env bash
# restore_hold.sh with a plain dump restored through psql (its header says
# what that form changes); 2,000,000 rows unless CE_RESTORE_ROWS says.
CE_RESTORE_FORM=plain CE_RESTORE_ROWS=${CE_RESTORE_ROWS:-2000000} exec bash "$(dirname "$0")/restore_hold.sh"
