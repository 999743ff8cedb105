//! The CLI's control requests: a tool call decided by the group's policy or
//! left to its admins (asked without blocking the loop, answered when they
//! answer), and the MCP messages for pincer's own tools.

use std::sync::atomic::Ordering;

use serde_json::Value;

use super::SessionActor;
use crate::claude::mcp::TOOL_PREFIX;
use crate::claude::protocol::{self, ControlRequest, HookDecision};
use crate::domain::{Approval, ApprovalAnswer, PermissionDecision};
use crate::session::approvals::{self, Answered, Ask};
use crate::session::permission::{decide, Rules, Verdict};
use crate::session::trust::Untrusted;
use crate::session::{files, rights};

impl SessionActor {
    pub(super) async fn on_control_request(&mut self, request_id: String, request: ControlRequest, raw: &str) {
        let line = match request {
            ControlRequest::HookCallback { callback_id, event, tool_name, input, tool_use_id, cwd } => {
                if callback_id != protocol::PRE_TOOL_HOOK || event != "PreToolUse" {
                    self.keep_as_evidence(Untrusted::UnknownHook, raw).await;
                    protocol::control_error(&request_id, &format!("pincer registered no hook `{callback_id}`"))
                } else {
                    self.on_pre_tool_use(&request_id, tool_name, tool_use_id, &input, cwd.as_deref()).await
                }
            }
            ControlRequest::CanUseTool { tool_name, input, tool_use_id } => {
                let Some(live) = self.live.as_mut() else { return };
                match live.trust.can_use_tool(tool_use_id.as_deref(), &tool_name) {
                    // The hook judged this call (with the CLI's cwd and spelling) and asked: the admins
                    // decide it. Judged again here, without that cwd, a path could read as the folder.
                    Ok(()) => return self.ask_admins(request_id, tool_name, tool_use_id, input).await,
                    Err(why) => {
                        self.keep_as_evidence(why, raw).await;
                        self.deny_untrusted(&request_id, tool_name, tool_use_id, &input).await
                    }
                }
            }
            ControlRequest::McpMessage { server_name, message } => {
                let response = self.deps.tools.answer(&self.group, &server_name, &message).await;
                protocol::mcp_response(&request_id, response)
            }
            ControlRequest::Other { subtype } => {
                tracing::warn!(group = %self.group, %subtype, "answering an unsupported control request with an error");
                protocol::control_error(&request_id, &format!("Unsupported control request subtype: {subtype}"))
            }
        };
        self.write(&line).await;
    }

    /// A control request of a process whose gate is not closed (its hook not
    /// taken, or refused): answered, since the CLI waits for every answer,
    /// and refused. Nothing of it runs.
    pub(super) async fn refuse_request(&mut self, request_id: String, request: ControlRequest) {
        let why = "pincer has not taken this process's tool check";
        let line = match request {
            ControlRequest::HookCallback { .. } => {
                protocol::control_success(&request_id, protocol::hook_answer(HookDecision::Deny, why))
            }
            ControlRequest::CanUseTool { tool_name, input, tool_use_id } => {
                self.deny_untrusted(&request_id, tool_name, tool_use_id, &input).await
            }
            ControlRequest::McpMessage { .. } | ControlRequest::Other { .. } => {
                protocol::control_error(&request_id, why)
            }
        };
        self.write(&line).await;
    }

    /// The denial of a permission request pincer does not believe, stored.
    async fn deny_untrusted(
        &self,
        request_id: &str,
        tool_name: String,
        tool_use_id: Option<String>,
        input: &Value,
    ) -> String {
        let answer = ApprovalAnswer { verdict: Approval::Deny, by: "pincer (untrusted request)".into() };
        let why = "pincer: this permission request does not follow pincer's own check of the call".into();
        self.answer_tool(request_id, tool_name, tool_use_id, input, answer, Some(why)).await
    }

    /// The group's rules for one tool call, a file tool's path included.
    /// `cwd` is where the CLI resolves a relative path (its own working
    /// directory when it does not say).
    fn verdict(&self, tool_name: &str, input: &Value, cwd: Option<&str>) -> Verdict {
        if self.policy.skip_permissions {
            // The operator's choice for a sandboxed group: every call runs, as with the CLI's own flag.
            return Verdict::Allow;
        }
        let member_tools = &self.deps.config.claude.member_tools;
        let place = files::target(tool_name, input).and_then(|path| {
            let live = self.live.as_ref()?;
            // pincer's own `send_file` reads relative to the group's folder, not the CLI's cwd.
            let cwd = if tool_name.starts_with(TOOL_PREFIX) { None } else { cwd };
            Some(files::place(&live.view, cwd, &path))
        });
        let rules = Rules {
            allowed: &self.policy.allowed_tools,
            has_admins: !self.policy.admins.is_empty(),
            member_bound: rights::member_bound(self.policy.tools, member_tools, self.turn.pending.voices()),
            file: place.as_ref(),
            // No process, no view: judged as the strictest (a file tool then has no process to run in anyway).
            unconfined: self.live.as_ref().is_none_or(|live| live.view.unconfined),
        };
        if rules.member_bound.is_some() {
            tracing::debug!(group = %self.group, tool = %tool_name, "a member's message is in the turn: read-only tools");
        }
        decide(&self.group, tool_name, input, rules)
    }

    /// pincer's `PreToolUse` hook: every call the CLI is about to make, also
    /// those it would make without asking. Allowed and denied calls are
    /// decided here and stored; a call for the admins is answered `ask`, so
    /// the CLI sends its `can_use_tool`, which asks them.
    async fn on_pre_tool_use(
        &mut self,
        request_id: &str,
        tool_name: String,
        tool_use_id: Option<String>,
        input: &Value,
        cwd: Option<&str>,
    ) -> String {
        let (decision, reason) = match self.verdict(&tool_name, input, cwd) {
            Verdict::Allow => {
                self.note_write(&tool_name, input, cwd).await;
                let by = if self.policy.skip_permissions { "skip_permissions" } else { "policy" };
                let answer = ApprovalAnswer { verdict: Approval::Allow, by: by.into() };
                self.record_decision(tool_name, tool_use_id, input, answer, None).await;
                (HookDecision::Allow, "allowed by the group's rules in pincer".to_owned())
            }
            Verdict::Deny(why) => {
                let answer = ApprovalAnswer { verdict: Approval::Deny, by: "policy".into() };
                self.record_decision(tool_name, tool_use_id, input, answer, Some(why.clone())).await;
                (HookDecision::Deny, why)
            }
            Verdict::Ask => {
                if let (Some(live), Some(id)) = (self.live.as_mut(), tool_use_id.as_deref()) {
                    live.trust.hook_asked(id, &tool_name);
                }
                (HookDecision::Ask, "an admin of the group decides".to_owned())
            }
        };
        protocol::control_success(request_id, protocol::hook_answer(decision, &reason))
    }

    /// Hands a tool call to the group's admins through the approvals channel,
    /// without blocking the loop: the CLI keeps printing (and the actor keeps
    /// storing) while people decide. The answer, or a denial when nobody
    /// answers in time, comes back as an event; one asked past the bound is
    /// denied now.
    async fn ask_admins(&mut self, request_id: String, tool_name: String, tool_use_id: Option<String>, input: Value) {
        let Some(generation) = self.live.as_ref().map(|l| l.generation) else {
            return;
        };
        let id = self.deps.approval_ids.fetch_add(1, Ordering::Relaxed) + 1;
        let ask = Ask { generation, request_id, tool_name, tool_use_id, input };
        let timeout = self.deps.config.claude.approval_timeout;
        let (mut request, answer) = approvals::request(id, &self.group, &ask, timeout);
        request.provenance = self.provenance_words().await;
        tracing::info!(group = %self.group, tool = %ask.tool_name, approval = id, "asking the group's admins");
        if let Some(denied) = self.approvals.ask(ask, request, answer, &self.deps.approvals) {
            self.answer_asked(denied).await;
        }
    }

    pub(super) async fn on_approved(&mut self, answered: Answered) {
        let live = self.live.as_ref().map(|l| l.generation);
        if !self.approvals.accept(&answered, live) {
            tracing::info!(group = %self.group, tool = %answered.ask.tool_name, "an approval came after its CLI process ended; dropped");
            return;
        }
        self.answer_asked(answered).await;
    }

    /// Answers an asked tool call as the person (or pincer) decided.
    async fn answer_asked(&mut self, answered: Answered) {
        let Answered { ask, answer } = answered;
        let Ask { request_id, tool_name, tool_use_id, input, .. } = ask;
        if answer.verdict != Approval::Deny {
            // "Since your last approval": a person allowed this call knowing what was written before it.
            self.provenance_approved().await;
        }
        if answer.verdict == Approval::AlwaysAllow {
            self.policy.allowed_tools.push(tool_name.clone());
            let default = &self.deps.config.claude.allowed_tools;
            if let Err(e) = self.deps.groups.allow_tool(&self.group, &tool_name, default).await {
                tracing::error!(group = %self.group, %e, "cannot store an always-allowed tool");
            }
        }
        let why = approvals::deny_reason(&tool_name, &answer, self.deps.config.claude.approval_timeout);
        let line = self.answer_tool(&request_id, tool_name, tool_use_id, &input, answer, why).await;
        self.write(&line).await;
    }

    /// Stores the decision on a tool call and returns the control response.
    async fn answer_tool(
        &self,
        request_id: &str,
        tool_name: String,
        tool_use_id: Option<String>,
        input: &Value,
        answer: ApprovalAnswer,
        deny_message: Option<String>,
    ) -> String {
        let allowed = answer.verdict != Approval::Deny;
        let response =
            if allowed { protocol::allow(input) } else { protocol::deny(deny_message.as_deref().unwrap_or("denied")) };
        self.record_decision(tool_name, tool_use_id, input, answer, deny_message).await;
        protocol::control_success(request_id, response)
    }

    /// Stores the decision on a tool call.
    async fn record_decision(
        &self,
        tool_name: String,
        tool_use_id: Option<String>,
        input: &Value,
        answer: ApprovalAnswer,
        deny_message: Option<String>,
    ) {
        let allowed = answer.verdict != Approval::Deny;
        let decision = PermissionDecision {
            tool_name,
            tool_use_id,
            input: input.to_string(),
            allowed,
            message: deny_message,
            decided_by: answer.by,
        };
        if let Err(e) = self.deps.journal.record_decision(&self.group, &decision).await {
            tracing::error!(group = %self.group, %e, "cannot store a permission decision");
        }
        tracing::info!(group = %self.group, tool = %decision.tool_name, allowed, by = %decision.decided_by, "decided a tool call");
    }
}
