//! A rule's configured action (docs/configuration.md): `Off`, `Audit`,
//! `Warn`, `Deny`, or staged enforcement `{action: Deny, warnUntil: RFC 3339}`.

use std::fmt;

use jiff::Timestamp;
use serde::de::{self, Error as _, MapAccess, Visitor};
use serde::{Deserialize, Deserializer};

use crate::admission::model::Action;

/// A configured action, with the date a staged `Deny` starts denying.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RuleAction {
    /// The action once enforcement starts.
    pub action: Action,
    /// Until this time the rule only warns (staged enforcement).
    pub warn_until: Option<Timestamp>,
}

impl From<Action> for RuleAction {
    fn from(action: Action) -> Self {
        Self {
            action,
            warn_until: None,
        }
    }
}

impl RuleAction {
    /// The action in force at `now`, and the date it will deny from while
    /// it is still staged.
    pub fn at(&self, now: Timestamp) -> (Action, Option<Timestamp>) {
        match self.warn_until {
            Some(t) if now < t => (Action::Warn, Some(t)),
            _ => (self.action, None),
        }
    }

    /// How it reads in `check`, `explain` and the docs at `now`, e.g.
    /// `Warn (Deny from 2027-01-31T00:00:00Z)` or `Deny (since …)`.
    pub fn describe(&self, now: Timestamp) -> String {
        match (self.at(now), self.warn_until) {
            ((a, Some(t)), _) => format!("{} (Deny from {t})", a.as_str()),
            ((a, None), Some(t)) => format!("{} (staged: warned until {t})", a.as_str()),
            ((a, None), None) => a.as_str().to_string(),
        }
    }
}

const ACTIONS: &[&str] = &["Off", "Audit", "Warn", "Deny"];

fn parse_action<E: de::Error>(s: &str) -> Result<Action, E> {
    match s {
        "Off" => Ok(Action::Off),
        "Audit" => Ok(Action::Audit),
        "Warn" => Ok(Action::Warn),
        "Deny" => Ok(Action::Deny),
        other => Err(E::unknown_variant(other, ACTIONS)),
    }
}

impl<'de> Deserialize<'de> for RuleAction {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = RuleAction;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("Off, Audit, Warn, Deny or {action: Deny, warnUntil: RFC 3339 time}")
            }
            fn visit_str<E: de::Error>(self, s: &str) -> Result<RuleAction, E> {
                parse_action(s).map(RuleAction::from)
            }
            // The YAML parser reads a bare `Off` as the boolean false.
            fn visit_bool<E: de::Error>(self, b: bool) -> Result<RuleAction, E> {
                if b {
                    Err(E::invalid_value(de::Unexpected::Bool(true), &self))
                } else {
                    Ok(Action::Off.into())
                }
            }
            fn visit_map<M: MapAccess<'de>>(self, mut m: M) -> Result<RuleAction, M::Error> {
                let (mut action, mut warn_until) = (None, None);
                while let Some(key) = m.next_key::<String>()? {
                    match key.as_str() {
                        "action" => action = Some(parse_action(&m.next_value::<String>()?)?),
                        "warnUntil" => {
                            let s = m.next_value::<String>()?;
                            let t = s.parse::<Timestamp>().map_err(|e| {
                                M::Error::custom(format!(
                                    "warnUntil {s:?} is not an RFC 3339 time: {e}"
                                ))
                            })?;
                            warn_until = Some(t);
                        }
                        other => {
                            return Err(M::Error::unknown_field(other, &["action", "warnUntil"]))
                        }
                    }
                }
                let action = action.ok_or_else(|| M::Error::missing_field("action"))?;
                if warn_until.is_some() && action != Action::Deny {
                    return Err(M::Error::custom(format!(
                        "warnUntil stages a Deny; it makes no sense with action {}",
                        action.as_str()
                    )));
                }
                Ok(RuleAction { action, warn_until })
            }
        }
        d.deserialize_any(V)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(s: &str) -> Timestamp {
        s.parse().unwrap()
    }

    #[test]
    fn staged_deny_warns_until_its_date_then_denies() {
        let a = RuleAction {
            action: Action::Deny,
            warn_until: Some(t("2027-01-31T00:00:00Z")),
        };
        assert_eq!(
            a.at(t("2027-01-30T23:59:59Z")),
            (Action::Warn, Some(t("2027-01-31T00:00:00Z")))
        );
        assert_eq!(a.at(t("2027-01-31T00:00:00Z")), (Action::Deny, None));
        assert_eq!(
            a.describe(t("2026-01-01T00:00:00Z")),
            "Warn (Deny from 2027-01-31T00:00:00Z)"
        );
        assert_eq!(
            a.describe(t("2028-01-01T00:00:00Z")),
            "Deny (staged: warned until 2027-01-31T00:00:00Z)"
        );
    }
}
