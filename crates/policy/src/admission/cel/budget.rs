//! The evaluation budget. `cel` has no cost tracking of its own, so the
//! compiler (see [`super::limits`]) rewrites every program to call
//! [`COST_FN`] around each comprehension condition and around the operands
//! of calls whose work grows with their input. That function charges a
//! thread-local meter; once it is spent, or once the wall-clock deadline has
//! passed, every further charge fails, which stops the evaluation.
//!
//! The meter is thread-local because `cel` overloads are plain `fn`
//! pointers: evaluation is synchronous, so the thread that arms the meter is
//! the one that runs the whole expression.

use std::cell::Cell;
use std::time::{Duration, Instant};

use cel::common::value::{BuiltinRef, CowVal, Val};
use cel::ExecutionError;

/// Cost units one evaluation may spend (the same figure as Kubernetes'
/// per-expression limit). One unit is roughly one element visited: a
/// comprehension iteration, a list or map entry, or 8 bytes of a string
/// handed to a function.
pub const COST_LIMIT: u64 = 1_000_000;

/// Wall-clock limit of one evaluation, a backstop for work the cost model
/// undercounts (deep equality of nested objects, for instance).
pub const TIME_LIMIT: Duration = Duration::from_millis(250);

/// The clock is read once every this many charges, to keep charges cheap.
/// The time limit counts from the first read: an evaluation that charges
/// fewer times never reads the clock (most rules; arming read it for each
/// of them, 10 of the 25 clock reads of a request with ten CEL rules), and
/// the work before it is at most this many charges, each bounded by the
/// cost limit.
const CLOCK_EVERY: u32 = 32;

/// The internal function the compiler wraps operands in. `@` cannot start
/// an identifier in CEL source, so no expression can call or shadow it.
pub const COST_FN: &str = "@mrguard_cost";

#[derive(Clone, Copy)]
struct Meter {
    remaining: u64,
    charges: u32,
    clock: RuleClock,
    exceeded: Option<Exceeded>,
}

/// The time backstop's state: not started until the clock is first read.
#[derive(Clone, Copy)]
enum RuleClock {
    Unread(Duration),
    Until(Instant),
    /// The limit does not fit in an `Instant`.
    Never,
}

impl RuleClock {
    /// Whether the time is up, starting it on the first call.
    fn late(&mut self) -> bool {
        let now = Instant::now();
        match *self {
            RuleClock::Unread(time) => {
                *self = now
                    .checked_add(time)
                    .map_or(RuleClock::Never, RuleClock::Until);
                false
            }
            RuleClock::Until(deadline) => now > deadline,
            RuleClock::Never => false,
        }
    }
}

/// Why an evaluation was stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exceeded {
    /// The cost budget ran out.
    Cost,
    /// The time backstop ran out.
    Time,
}

thread_local! {
    static METER: Cell<Option<Meter>> = const { Cell::new(None) };
}

/// Arms the meter for one evaluation on this thread; disarms it on drop.
pub struct Guard {
    previous: Option<Meter>,
}

impl Guard {
    /// Arms a meter of `limit` cost units and `time` for this thread.
    pub fn arm(limit: u64, time: Duration) -> Self {
        let meter = Meter {
            remaining: limit,
            charges: 0,
            clock: RuleClock::Unread(time),
            exceeded: None,
        };
        Guard {
            previous: METER.with(|m| m.replace(Some(meter))),
        }
    }

    /// Whether the evaluation ran out, even if CEL's error absorption in
    /// `||`/`&&` swallowed the failed charge.
    pub fn exceeded(&self) -> Option<Exceeded> {
        METER.with(|m| m.get().and_then(|m| m.exceeded))
    }

    /// Cost units spent so far.
    pub fn spent(&self, limit: u64) -> u64 {
        METER.with(|m| m.get().map_or(0, |m| limit - m.remaining))
    }
}

impl Drop for Guard {
    fn drop(&mut self) {
        METER.with(|m| m.set(self.previous));
    }
}

fn exceeded_error(why: Exceeded) -> ExecutionError {
    let message = match why {
        Exceeded::Cost => format!("cost limit of {COST_LIMIT} exceeded"),
        Exceeded::Time => format!("time limit of {}ms exceeded", TIME_LIMIT.as_millis()),
    };
    ExecutionError::function_error("budget", message)
}

/// Spends `units`; fails once the budget or the time is used up. Charges made
/// with no meter armed (a program run outside [`super::CelProgram`]) are free.
pub fn charge(units: u64) -> Result<(), ExecutionError> {
    METER.with(|cell| {
        let Some(mut m) = cell.get() else {
            return Ok(());
        };
        if let Some(why) = m.exceeded {
            return Err(exceeded_error(why));
        }
        m.charges = m.charges.wrapping_add(1);
        let why = if units > m.remaining {
            m.remaining = 0;
            Some(Exceeded::Cost)
        } else {
            m.remaining -= units;
            let late = m.charges % CLOCK_EVERY == 0 && m.clock.late();
            late.then_some(Exceeded::Time)
        };
        m.exceeded = why;
        cell.set(Some(m));
        why.map_or(Ok(()), |w| Err(exceeded_error(w)))
    })
}

/// What handing `v` to a function costs: 1 plus its size.
pub fn size_of(v: &dyn Val) -> u64 {
    let n = match v.as_builtin() {
        BuiltinRef::List(l) => l.inner().len(),
        BuiltinRef::Map(m) => m.inner().len(),
        BuiltinRef::String(s) => s.inner().len() / 8,
        BuiltinRef::Bytes(b) => b.inner().len() / 8,
        _ => 0,
    };
    1 + n as u64
}

/// The body of [`COST_FN`]: charges for its operand and hands it back.
pub fn cost_fn<'b, 'v>(mut args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let Some(v) = args.pop() else {
        return Err(ExecutionError::invalid_argument_count(1, 0));
    };
    charge(size_of(v.as_ref()))?;
    Ok(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cost_is_charged_and_sticks_once_spent() {
        let guard = Guard::arm(10, Duration::from_secs(60));
        assert!(charge(4).is_ok());
        assert!(charge(6).is_ok());
        assert_eq!(guard.spent(10), 10);
        assert!(charge(1).is_err());
        assert_eq!(guard.exceeded(), Some(Exceeded::Cost));
        // Even a free-looking charge fails afterwards.
        assert!(charge(0).is_err());
        drop(guard);
        // Disarmed: charging is free again.
        assert!(charge(u64::MAX).is_ok());
    }

    #[test]
    fn the_clock_stops_long_evaluations() {
        let guard = Guard::arm(u64::MAX, Duration::ZERO);
        // The clock starts at the first read, after CLOCK_EVERY charges...
        let first_err = (1..=CLOCK_EVERY).find(|_| charge(1).is_err());
        assert_eq!(first_err, None);
        std::thread::sleep(Duration::from_millis(2));
        // ...and the next read finds the time up.
        let first_err = (1..=CLOCK_EVERY).find(|_| charge(1).is_err());
        assert_eq!(first_err, Some(CLOCK_EVERY));
        assert_eq!(guard.exceeded(), Some(Exceeded::Time));
    }

    #[test]
    fn a_short_evaluation_never_reads_the_clock() {
        // With no time at all, fewer charges than CLOCK_EVERY still pass:
        // the clock was never read, so the limit never started.
        let guard = Guard::arm(u64::MAX, Duration::ZERO);
        std::thread::sleep(Duration::from_millis(2));
        assert!((1..CLOCK_EVERY).all(|_| charge(1).is_ok()));
        assert_eq!(guard.exceeded(), None);
    }

    #[test]
    fn guards_nest() {
        let outer = Guard::arm(5, Duration::from_secs(60));
        {
            let _inner = Guard::arm(1, Duration::from_secs(60));
            assert!(charge(2).is_err());
        }
        assert!(charge(5).is_ok());
        assert_eq!(outer.exceeded(), None);
    }
}
