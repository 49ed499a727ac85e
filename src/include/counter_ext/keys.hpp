// Keys of tracked counters and rollups: how a key argument becomes a value
// of the key type, and which operators compare keys. No user-defined cast
// and no operator found through a search_path ever runs for a key.
#pragma once

#include "counter_ext/pg.hpp"

namespace ce::keys {

// A key given as type 'given' (value 'value'), as a value of 'key_type':
//   - the same type: as it is;
//   - text or unknown: through the key type's input function (a domain's
//     constraints are checked);
//   - another type with an implicit cast made by initdb (int4 to int8, varchar
//     to text: built in, never user-defined) or binary coercible: that cast;
// anything else is refused with 42804. Run as the object's owner (a domain
// constraint may call the owner's functions). Owns nothing C++.
Datum convert(Oid given, Datum value, Oid key_type, const char *object_name);

// "OPERATOR(schema.op)" for the =, < or > of the type's default btree
// operator class (strategy 3, 1 or 5), or 42883. Owns nothing C++.
char *qualified_operator(Oid type, int strategy);

} // namespace ce::keys
