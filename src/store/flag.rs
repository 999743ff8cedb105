//! A yes/no column as either backend gives it back: SQLite has no boolean
//! type (its flags are integers, and so are PostgreSQL's, to share the
//! statements), while an expression such as `EXISTS (…)` is a boolean in
//! PostgreSQL. sqlx's `Any` driver decodes `bool` only from a boolean, so
//! the store reads every flag as a [`Flag`]. Touches nothing but the value.

use sqlx::any::{AnyTypeInfo, AnyTypeInfoKind, AnyValueRef};
use sqlx::error::BoxDynError;
use sqlx::{Any, Decode, Type};

/// A flag read back: non-zero (or true) is set.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Flag(pub bool);

impl From<Flag> for bool {
    fn from(flag: Flag) -> bool {
        flag.0
    }
}

impl Type<Any> for Flag {
    fn type_info() -> AnyTypeInfo {
        <bool as Type<Any>>::type_info()
    }

    fn compatible(ty: &AnyTypeInfo) -> bool {
        use AnyTypeInfoKind::{BigInt, Bool, Integer, SmallInt};
        matches!(ty.kind(), Bool | SmallInt | Integer | BigInt)
    }
}

impl<'r> Decode<'r, Any> for Flag {
    fn decode(value: AnyValueRef<'r>) -> Result<Flag, BoxDynError> {
        match <i64 as Decode<Any>>::decode(value.clone()) {
            Ok(n) => Ok(Flag(n != 0)),
            Err(_) => Ok(Flag(<bool as Decode<Any>>::decode(value)?)),
        }
    }
}
