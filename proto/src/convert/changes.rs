//! The core's change feed on the wire (`CoreCache.Watch`) and as [`shared::changes`].

use shared::changes::{Change, Changes, Resync, Revised};

use crate::cache::{
    feed_change, watch_event, FeedChange, FeedChanges, FeedResync, KeyInvalidated, ModelCanary, ServedModel,
    TagInvalidated, TenantSettings, WatchEvent,
};

impl From<&Revised> for FeedChange {
    fn from(revised: &Revised) -> Self {
        let model = |name: &str, version: u64| ServedModel { name: name.to_owned(), version, spec: None };
        let change = match &revised.change {
            Change::Key { tenant, key } => {
                feed_change::Change::Key(KeyInvalidated { tenant: tenant.clone(), key: key.clone() })
            }
            Change::Tag { tenant, tag } => {
                feed_change::Change::Tag(TagInvalidated { tenant: tenant.clone(), tag: tag.clone() })
            }
            Change::Tenant { tenant } => feed_change::Change::Tenant(tenant.clone()),
            Change::ModelVersion { model: name, version } => {
                feed_change::Change::ModelVersion(model(name, *version))
            }
            Change::ModelCurrent { model: name, version } => {
                feed_change::Change::ModelCurrent(model(name, *version))
            }
            Change::ModelCanary { model, version, percent } => {
                feed_change::Change::ModelCanary(ModelCanary {
                    model: model.clone(),
                    version: *version,
                    percent: u32::from(*percent),
                })
            }
            Change::ModelSpec { model: name, spec } => feed_change::Change::ModelSpec(ServedModel {
                name: name.clone(),
                version: 0,
                spec: Some(spec.into()),
            }),
            Change::TenantSettings { tenant, cache_sampled } => {
                feed_change::Change::TenantSettings(TenantSettings {
                    tenant: tenant.clone(),
                    cache_sampled: *cache_sampled,
                })
            }
        };
        FeedChange { revision: revised.revision, at_ms: revised.at_ms, change: Some(change) }
    }
}

impl TryFrom<FeedChange> for Revised {
    type Error = String;

    fn try_from(wire: FeedChange) -> Result<Self, String> {
        let change = match wire.change.ok_or("a feed change without a change")? {
            feed_change::Change::Key(k) => Change::Key { tenant: k.tenant, key: k.key },
            feed_change::Change::Tag(t) => Change::Tag { tenant: t.tenant, tag: t.tag },
            feed_change::Change::Tenant(tenant) => Change::Tenant { tenant },
            feed_change::Change::ModelVersion(m) => {
                Change::ModelVersion { model: m.name, version: m.version }
            }
            feed_change::Change::ModelCurrent(m) => {
                Change::ModelCurrent { model: m.name, version: m.version }
            }
            feed_change::Change::ModelCanary(c) => Change::ModelCanary {
                model: c.model,
                version: c.version,
                percent: u8::try_from(c.percent).map_err(|_| "a canary's percent above 255")?,
            },
            feed_change::Change::ModelSpec(m) => {
                let spec = m.spec.ok_or("a model spec change without a spec")?;
                Change::ModelSpec { model: m.name, spec: spec.try_into()? }
            }
            feed_change::Change::TenantSettings(t) => {
                Change::TenantSettings { tenant: t.tenant, cache_sampled: t.cache_sampled }
            }
        };
        Ok(Revised { revision: wire.revision, at_ms: wire.at_ms, change })
    }
}

impl From<&Resync> for FeedResync {
    fn from(resync: &Resync) -> Self {
        FeedResync {
            revision: resync.revision,
            floor_ms: resync.floor_ms,
            models: resync
                .models
                .iter()
                .map(|(name, version)| ServedModel {
                    name: name.clone(),
                    version: *version,
                    spec: resync.specs.iter().find(|(m, _)| m == name).map(|(_, spec)| spec.into()),
                })
                .collect(),
            cache_sampled: resync.cache_sampled.clone(),
            canaries: resync
                .canaries
                .iter()
                .map(|(model, version, percent)| ModelCanary {
                    model: model.clone(),
                    version: *version,
                    percent: u32::from(*percent),
                })
                .collect(),
        }
    }
}

impl From<FeedResync> for Resync {
    /// The resync; a model spec that does not convert is left out (the model keeps serving).
    fn from(wire: FeedResync) -> Self {
        let specs = wire
            .models
            .iter()
            .filter_map(|m| Some((m.name.clone(), m.spec.clone()?.try_into().ok()?)))
            .collect();
        Resync {
            revision: wire.revision,
            floor_ms: wire.floor_ms,
            models: wire.models.into_iter().map(|m| (m.name, m.version)).collect(),
            cache_sampled: wire.cache_sampled,
            canaries: wire
                .canaries
                .into_iter()
                .filter_map(|c| Some((c.model, c.version, u8::try_from(c.percent).ok()?)))
                .collect(),
            specs,
            // The core's resyncs floor everything at its log time; per-tenant floors travel only from a
            // regional node to the edge.
            tenant_floors: Vec::new(),
            model_version_floors: Vec::new(),
            tag_floors: Vec::new(),
            tagged_floors: Vec::new(),
        }
    }
}

impl From<&Changes> for WatchEvent {
    /// A batch as one event: its resync if it has one (then its changes follow in later events), else
    /// its changes, else progress.
    fn from(batch: &Changes) -> Self {
        let event = match (&batch.resync, batch.changes.is_empty()) {
            (Some(resync), _) => watch_event::Event::Resync(resync.into()),
            (None, false) => watch_event::Event::Changes(FeedChanges {
                changes: batch.changes.iter().map(Into::into).collect(),
            }),
            (None, true) => watch_event::Event::Progress(true),
        };
        WatchEvent {
            revision: batch.revision,
            event: Some(event),
            confirmed_age_ms: batch.confirmed_age_ms,
            at_head: batch.at_head,
            core_time_ms: batch.core_time_ms,
        }
    }
}

impl TryFrom<WatchEvent> for Changes {
    type Error = String;

    fn try_from(wire: WatchEvent) -> Result<Self, String> {
        let mut batch = Changes {
            revision: wire.revision,
            confirmed_age_ms: wire.confirmed_age_ms,
            core_time_ms: wire.core_time_ms,
            at_head: wire.at_head,
            ..Default::default()
        };
        match wire.event.ok_or("a watch event without an event")? {
            watch_event::Event::Resync(resync) => batch.resync = Some(resync.into()),
            watch_event::Event::Changes(changes) => {
                batch.changes =
                    changes.changes.into_iter().map(Revised::try_from).collect::<Result<_, _>>()?
            }
            watch_event::Event::Progress(_) => {}
        }
        Ok(batch)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use shared::model_spec::{ModelApi, ModelSpec};

    fn spec() -> ModelSpec {
        ModelSpec { context_length: 8192, apis: vec![ModelApi::Completions], ..Default::default() }
    }

    #[test]
    fn every_change_and_a_resync_cross_the_wire_unchanged() {
        let changes = vec![
            Change::Key { tenant: "a".into(), key: "k".into() },
            Change::Tenant { tenant: "a".into() },
            Change::Tag { tenant: "a".into(), tag: "stock:AAPL".into() },
            Change::ModelCanary { model: "m".into(), version: 3, percent: 25 },
            Change::ModelVersion { model: "m".into(), version: 2 },
            Change::ModelCurrent { model: "m".into(), version: 3 },
            Change::TenantSettings { tenant: "b".into(), cache_sampled: true },
            Change::ModelSpec { model: "m".into(), spec: spec() },
        ];
        let batch = Changes {
            revision: 9,
            resync: None,
            changes: changes
                .into_iter()
                .enumerate()
                .map(|(i, change)| Revised { revision: i as u64 + 5, at_ms: 100, change })
                .collect(),
            confirmed_age_ms: Some(12),
            core_time_ms: Some(1_700_000_000_000),
            at_head: false,
        };
        assert_eq!(Changes::try_from(WatchEvent::from(&batch)), Ok(batch));
        let resync = Changes {
            revision: 4,
            resync: Some(Resync {
                revision: 4,
                floor_ms: 7,
                models: vec![("m".into(), 2)],
                cache_sampled: vec!["a".into()],
                specs: vec![("m".into(), spec())],
                ..Default::default()
            }),
            changes: vec![],
            confirmed_age_ms: None,
            core_time_ms: None,
            at_head: true,
        };
        assert_eq!(Changes::try_from(WatchEvent::from(&resync)), Ok(resync));
        let progress =
            Changes { revision: 11, confirmed_age_ms: Some(0), at_head: true, ..Default::default() };
        assert_eq!(Changes::try_from(WatchEvent::from(&progress)), Ok(progress));
        assert!(Changes::try_from(WatchEvent { revision: 1, ..Default::default() }).is_err());
    }
}
