//! The one allowance a whole-system test gives a bounded operation, so
//! every bound on a time is stated against the same figure. (The crates'
//! own tests bound a stop by the wait it cuts short: the deadline, the
//! timeout or the delay that would otherwise have ended it.)

use std::time::Duration;

/// How far past its bound (a deadline, or "at once" for a stop or a
/// cancel) a test lets an operation end. Generous: a machine four times
/// slower than the 2-core development one, or one busy building, still
/// passes. A test that uses it makes the unbounded case last well past it
/// (a 30 s sleep, a model call that never answers), so the bound still
/// tells the two apart.
pub const MARGIN: Duration = Duration::from_secs(3);
