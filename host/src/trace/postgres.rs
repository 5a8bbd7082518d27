//! Traces in PostgreSQL. (Being written: see the issue.)

use super::event::{Event, EventKind};
use super::goal::GoalTree;
use super::message::Message;
use super::model::Trace;
use super::store::{TraceError, TraceFilter, TraceStore};
use crate::database::Database;
use async_trait::async_trait;

/// Traces, messages, goals and events in a PostgreSQL database.
#[derive(Clone, Debug)]
pub struct PgTraceStore {
    db: Database,
}

impl PgTraceStore {
    /// The store on `db` (already migrated).
    pub fn new(db: Database) -> Self {
        Self { db }
    }
}

#[async_trait]
impl TraceStore for PgTraceStore {
    async fn create_trace(&self, _trace: &Trace) -> Result<(), TraceError> {
        let _ = &self.db;
        unimplemented!()
    }
    async fn get_trace(&self, _id: &str) -> Result<Option<Trace>, TraceError> {
        unimplemented!()
    }
    async fn update_trace(&self, _trace: &Trace) -> Result<(), TraceError> {
        unimplemented!()
    }
    async fn list_traces(&self, _filter: &TraceFilter) -> Result<Vec<Trace>, TraceError> {
        unimplemented!()
    }
    async fn add_message(
        &self,
        _trace: &mut Trace,
        _message: Message,
        _parent: Option<u64>,
    ) -> Result<Message, TraceError> {
        unimplemented!()
    }
    async fn set_head(&self, _trace: &mut Trace, _sequence: u64) -> Result<(), TraceError> {
        unimplemented!()
    }
    async fn get_messages(&self, _id: &str) -> Result<Vec<Message>, TraceError> {
        unimplemented!()
    }
    async fn get_message(&self, _id: &str, _sequence: u64) -> Result<Option<Message>, TraceError> {
        unimplemented!()
    }
    async fn get_main_path_messages(
        &self,
        _id: &str,
        _head: u64,
    ) -> Result<Vec<Message>, TraceError> {
        unimplemented!()
    }
    async fn get_messages_by_goal(
        &self,
        _id: &str,
        _goal_id: &str,
    ) -> Result<Vec<Message>, TraceError> {
        unimplemented!()
    }
    async fn append_event(&self, _trace: &mut Trace, _kind: EventKind) -> Result<Event, TraceError> {
        unimplemented!()
    }
    async fn events_after(&self, _id: &str, _after: u64) -> Result<Vec<Event>, TraceError> {
        unimplemented!()
    }
    async fn get_goals(&self, _id: &str) -> Result<GoalTree, TraceError> {
        unimplemented!()
    }
    async fn save_goals(&self, _id: &str, _tree: &GoalTree) -> Result<(), TraceError> {
        unimplemented!()
    }
    async fn import_trace(&self, _snapshot: &super::store::TraceSnapshot) -> Result<(), TraceError> {
        unimplemented!("being written")
    }

    async fn sync(&self) -> Result<(), TraceError> {
        unimplemented!()
    }
}
