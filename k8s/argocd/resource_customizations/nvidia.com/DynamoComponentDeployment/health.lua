-- Health of an NVIDIA Dynamo DynamoComponentDeployment (DCD).
--
-- Degraded: a container of the component is crash-looping, or will never be ready for another reason
-- (an image that cannot be pulled, a missing Secret, no node, an exit 0 restarted forever, an OOM
-- kill), as a watcher such as crashwatch reports it: the kstatus condition Stalled=True, or
-- Available=False with one of crashwatch's reasons (ContainerCrashLooping; the others with
-- --failed-state all). Stalled=True counts even when the operator has since rewritten Available.
-- Healthy: Available=True for the current generation.
-- Progressing: anything else, including no status yet and an Available condition for an older
-- generation.
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

-- crashwatch's reasons, each with what it says when its condition has no message
local failureWords = {
  ContainerCrashLooping = "A container is crash-looping",
  ImagePullFailing = "A container's image cannot be pulled",
  ContainerConfigError = "A container cannot be created (a Secret or ConfigMap is missing)",
  PodUnschedulable = "A Pod cannot be scheduled",
  ContainerRestartLooping = "A container exits 0 and is restarted forever",
  ContainerOOMKilled = "A container is OOM-killed",
}

local function wordsOf(condition)
  if condition ~= nil and type(condition.reason) == "string" and condition.reason ~= "" then
    return failureWords[condition.reason] or ("The component is stalled: " .. condition.reason)
  end
  return "A container is crash-looping"
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
  hs.message = "Waiting for the component's status"
  return hs
end

local stalled = conditionOf(status, "Stalled")
local available = conditionOf(status, "Available")
local stalledTrue = stalled ~= nil and stalled.status == "True"
local availableCrashLooping = available ~= nil and available.status == "False"
  and type(available.reason) == "string" and failureWords[available.reason] ~= nil

if stalledTrue or availableCrashLooping then
  hs.status = "Degraded"
  local message = nil
  if stalledTrue then
    message = messageOf(stalled)
  end
  if message == nil and availableCrashLooping then
    message = messageOf(available)
  end
  if message == nil then
    if stalledTrue then
      message = wordsOf(stalled)
    else
      message = wordsOf(available)
    end
  end
  hs.message = message
  return hs
end

if available == nil then
  hs.status = "Progressing"
  hs.message = "Waiting for the Available condition"
  return hs
end

-- The generation the condition speaks for: its own observedGeneration, else status.observedGeneration.
-- When neither is given, the condition is taken to be current.
local generation = nil
if obj.metadata ~= nil then
  generation = obj.metadata.generation
end
local observed = available.observedGeneration
if observed == nil then
  observed = status.observedGeneration
end
local behind = nil
if generation ~= nil and observed ~= nil and observed ~= generation then
  behind = "status is for generation " .. tostring(observed) .. ", the spec is at generation " .. tostring(generation)
end

if available.status == "True" and behind == nil then
  hs.status = "Healthy"
  hs.message = messageOf(available) or ""
  return hs
end

hs.status = "Progressing"
if available.status == "True" then
  hs.message = "Waiting for the operator: " .. behind
  return hs
end
local message = messageOf(available)
if message == nil then
  message = "Available is " .. tostring(available.status or "Unknown")
  if type(available.reason) == "string" and available.reason ~= "" then
    message = message .. ": " .. available.reason
  end
end
if behind ~= nil then
  message = message .. " (" .. behind .. ")"
end
hs.message = message
return hs
