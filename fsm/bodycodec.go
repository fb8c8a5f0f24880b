package fsm

// The bodies every agent task records at each stage (and its input and
// admission), and a dispatch task's creation, are encoded by hand,
// with the Task's encoder (taskcodec.go): the same bytes internal/codec's
// reflection encoder writes (TestEncodeBodyMatchesReflection), at a
// fraction of its cost. Other bodies go through reflection.

// encBody writes b with e when b is one of the bodies encoded by hand, and
// reports whether it was.
func encBody(e *taskEncoder, b Body) bool {
	switch v := b.(type) {
	case *Input:
		encInput(e, v)
	case *TaskCreatedBody:
		encTaskCreated(e, v)
	case *ModelCalledBody:
		encModelCalled(e, v)
	case *ReasonDoneBody:
		encReasonDone(e, v)
	case *ToolCallStartedBody:
		encToolCallStarted(e, v)
	case *ToolCallResultBody:
		encToolCallResult(e, v)
	case *StepCompletedBody:
		encStepCompleted(e, v)
	case *TaskCompletedBody:
		f := e.open()
		e.fStr(&f, "result", v.Result)
		e.close(f)
	case *TaskNotifyBody:
		f := e.open()
		e.fStr(&f, "message", v.Message)
		e.close(f)
	case *DispatchCreatedBody:
		encDispatchCreated(e, v)
	default:
		return false
	}
	return true
}

func encModelCalled(e *taskEncoder, b *ModelCalledBody) {
	f := e.open()
	e.fStr(&f, "purpose", b.Purpose)
	e.fInt(&f, "attempt", b.Attempt)
	e.fStr(&f, "model", b.Model)
	e.fInt64(&f, "latency_ms", b.LatencyMS)
	e.fInt(&f, "status", b.Status)
	e.fStr(&f, "error", b.Error)
	e.fInt(&f, "prompt_tokens", b.PromptTokens)
	e.fInt(&f, "completion_tokens", b.CompletionTokens)
	e.fStr(&f, "content", b.Content)
	fSlice(e, &f, "tool_calls", b.ToolCalls, encToolCall)
	e.fStr(&f, "finish_reason", b.FinishReason)
	e.close(f)
}

func encReasonDone(e *taskEncoder, b *ReasonDoneBody) {
	f := e.open()
	fStruct(e, &f, "reasoning", &b.Reasoning, encReasoning)
	fStruct(e, &f, "plan", &b.Plan, encPlan)
	fSlice(e, &f, "new_messages", b.NewMessages, encMessage)
	e.close(f)
}

func encToolCallResult(e *taskEncoder, b *ToolCallResultBody) {
	f := e.open()
	e.fInt(&f, "step_index", b.StepIndex)
	e.fStr(&f, "tool", b.Tool)
	e.fStr(&f, "tool_call_id", b.ToolCallID)
	e.fStr(&f, "idempotency_key", b.IdempotencyKey)
	e.fStr(&f, "result", b.Result)
	e.fStr(&f, "error", b.Error)
	e.fInt64(&f, "duration_ms", b.DurationMS)
	fSlice(e, &f, "new_messages", b.NewMessages, encMessage)
	e.fStr(&f, "source", b.Source)
	e.fStr(&f, "task", b.Task)
	fSlice(e, &f, "parts", b.Parts, encToolPart)
	e.close(f)
}

func encToolPart(e *taskEncoder, p *ToolPart) {
	f := e.open()
	e.fStr(&f, "type", p.Type)
	e.fStr(&f, "mime_type", p.MIMEType)
	e.fStr(&f, "text", p.Text)
	e.fStr(&f, "uri", p.URI)
	e.fStr(&f, "data", p.Data)
	e.fInt(&f, "size", p.Size)
	e.fBool(&f, "truncated", p.Truncated)
	e.close(f)
}

func encStepCompleted(e *taskEncoder, b *StepCompletedBody) {
	f := e.open()
	e.fInt(&f, "step_index", b.StepIndex)
	e.fStr(&f, "result", b.Result)
	fSlice(e, &f, "new_messages", b.NewMessages, encMessage)
	e.close(f)
}

func encInput(e *taskEncoder, b *Input) {
	f := e.open()
	e.fStr(&f, "kind", string(b.Kind))
	e.fStr(&f, "text", b.Text)
	e.fStr(&f, "source", b.Source)
	e.fStr(&f, "task_type", b.TaskType)
	e.fInt(&f, "priority", b.Priority)
	e.fStrMap(&f, "metadata", b.Metadata)
	e.fStr(&f, "name", b.Name)
	fPtr(e, &f, "machine", b.Machine, encMachineRef)
	e.fStr(&f, "parent_task_id", b.ParentTaskID)
	e.fStr(&f, "concurrency_key", b.ConcurrencyKey)
	e.close(f)
}

func encTaskCreated(e *taskEncoder, b *TaskCreatedBody) {
	f := e.open()
	fStruct(e, &f, "machine", &b.Machine, encMachineRef)
	e.fStr(&f, "task_type", b.TaskType)
	e.fStr(&f, "input_text", b.InputText)
	e.fStrMap(&f, "input_metadata", b.InputMetadata)
	e.fStr(&f, "source", b.Source)
	e.fInt(&f, "priority", b.Priority)
	e.fStrMap(&f, "metadata", b.Metadata)
	e.fStr(&f, "parent_task_id", b.ParentTaskID)
	e.fStr(&f, "type_version", b.TypeVersion)
	e.fStr(&f, "model", b.Model)
	e.fStr(&f, "concurrency_key", b.ConcurrencyKey)
	e.close(f)
}

func encDispatchCreated(e *taskEncoder, b *DispatchCreatedBody) {
	f := e.open()
	e.fStr(&f, "agent_id", b.AgentID)
	e.fStr(&f, "title", b.Title)
	e.fStr(&f, "description", b.Description)
	e.fStr(&f, "owner", b.Owner)
	e.fStrs(&f, "required_capabilities", b.RequiredCapabilities)
	e.fInt(&f, "priority", b.Priority)
	e.fInt(&f, "timeout_seconds", b.TimeoutSeconds)
	e.fInt(&f, "max_retries", b.MaxRetries)
	e.fBool(&f, "retry_eligible", b.RetryEligible)
	e.fStr(&f, "source", b.Source)
	e.fStr(&f, "parent_task_id", b.ParentTaskID)
	e.fStrMap(&f, "metadata", b.Metadata)
	e.fTime(&f, "run_at", b.RunAt)
	e.fInt(&f, "heartbeat_seconds", b.HeartbeatSeconds)
	e.fInt(&f, "retry_backoff_seconds", b.RetryBackoffSeconds)
	e.fStr(&f, "concurrency_key", b.ConcurrencyKey)
	e.fStrs(&f, "metadata_json", b.MetadataJSON)
	e.close(f)
}
