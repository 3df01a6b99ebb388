-- Health of an NVIDIA Dynamo DynamoGraphDeployment (DGD).
--
-- Degraded: the graph has failed. Either a watcher such as crashwatch found a component crash-looping,
-- or another reason it will never be ready (an image that cannot be pulled, a missing Secret, no node
-- for its GPUs, a server that exits 0, an OOM kill), and set the kstatus condition Stalled=True with a
-- reason naming it, or status.state is "failed". Stalled=True counts even when an older operator has
-- rewritten state back to "pending", since the failure still holds.
-- Healthy: state "successful" and the status is for the current generation.
-- Progressing: anything else, including no status yet and a status for an older generation.
--
-- Written for Argo CD's Lua VM without the standard libraries: base and table functions only.

local hs = {}

local function conditionOf(status, conditionType)
  if type(status.conditions) ~= "table" then
    return nil
  end
  for _, condition in ipairs(status.conditions) do
    if type(condition) == "table" and condition.type == conditionType then
      return condition
    end
  end
  return nil
end

-- What a Stalled=True without a message says: its reason, in words where crashwatch wrote it.
local stalledWords = {
  ComponentCrashLooping = "A component is crash-looping",
  ComponentCrashedCertainCause = "A component crashed with a cause a restart cannot cure",
  ComponentImagePullFailing = "A component's image cannot be pulled",
  ComponentConfigError = "A component's container cannot be created (a Secret or ConfigMap is missing)",
  ComponentUnschedulable = "A component's Pod cannot be scheduled",
  ComponentRestartLooping = "A component's container exits 0 and is restarted forever",
  ComponentOOMKilled = "A component's container is OOM-killed",
  ComponentsFailing = "Components are failing",
}

local function stalledWordsOf(condition)
  if type(condition.reason) == "string" and condition.reason ~= "" then
    return stalledWords[condition.reason] or ("The graph is stalled: " .. condition.reason)
  end
  return "A component is crash-looping"
end

local function messageOf(condition)
  if condition ~= nil and type(condition.message) == "string" and condition.message ~= "" then
    return condition.message
  end
  return nil
end

local status = obj.status
if type(status) ~= "table" then
  hs.status = "Progressing"
  hs.message = "Waiting for the graph's status"
  return hs
end

local stalled = conditionOf(status, "Stalled")
local ready = conditionOf(status, "Ready")
local stalledTrue = stalled ~= nil and stalled.status == "True"

if stalledTrue or status.state == "failed" then
  hs.status = "Degraded"
  local message = nil
  if stalledTrue then
    message = messageOf(stalled)
  end
  if message == nil then
    message = messageOf(ready)
  end
  if message == nil then
    if stalledTrue then
      message = stalledWordsOf(stalled)
    else
      message = "The graph has failed"
    end
  end
  hs.message = message
  return hs
end

-- The generation the status speaks for: the operator's status.observedGeneration, else the Ready
-- condition's. When neither is given, the status is taken to be current.
local generation = nil
if obj.metadata ~= nil then
  generation = obj.metadata.generation
end
local observed = status.observedGeneration
if observed == nil and ready ~= nil then
  observed = ready.observedGeneration
end
local behind = nil
if generation ~= nil and observed ~= nil and observed ~= generation then
  behind = "status is for generation " .. tostring(observed) .. ", the spec is at generation " .. tostring(generation)
end

if status.state == "successful" and behind == nil then
  hs.status = "Healthy"
  hs.message = messageOf(ready) or ""
  return hs
end

hs.status = "Progressing"
if status.state == "successful" then
  hs.message = "Waiting for the operator: " .. behind
  return hs
end
local message = messageOf(ready)
if message == nil then
  if status.state ~= nil then
    message = "The graph is " .. tostring(status.state)
  else
    message = "Waiting for the graph's status"
  end
end
if behind ~= nil then
  message = message .. " (" .. behind .. ")"
end
hs.message = message
return hs
